"""``hasten serve --workers``: the relay of cache deletes, the config checks, and the real
processes (two workers on one port, a delete reaching the other worker's L1, a killed
worker restarted, a clean stop)."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from hasten.cache import CachedAnswer, MemoryLRU, TieredCache
from hasten.config import parse_config
from hasten.config.semantic import SemanticConfig
from hasten.errors import ConfigError
from hasten.server import run
from hasten.server.workers import PeerLink, check_workers
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body
from tests.support.servers import GatewayProcess, ServerThread

ADMIN_KEY = "workers-admin-key-0123456789abcdef"


def _answer(text: str) -> CachedAnswer:
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    ]}  # fmt: skip
    return CachedAnswer.from_body(json.dumps(body).encode(), endpoint="chat", ttl_s=60.0)


# --- PeerLink, in one process over a real socket pair -----------------------------------------


async def test_a_delete_is_announced_and_a_peer_delete_drops_only_l1() -> None:
    ours, parent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent.setblocking(False)
    cache = TieredCache(MemoryLRU(1 << 20))
    link = PeerLink(ours)
    link.attach(cache)
    cache.put("k1", _answer("one"))
    cache.put("k2", _answer("two"))
    await cache.delete("k1")
    assert parent.recv(4096) == b"dk1"  # what the parent relays to the other workers
    parent.send(b"dk2")  # another worker deleted k2 from the shared tier
    for _ in range(100):
        if link.num_received:
            break
        await asyncio.sleep(0.01)
    assert link.num_received == 1
    assert await cache.get("k2") is None
    with pytest.raises(BlockingIOError):
        parent.recv(4096)  # a delete applied from a peer is not announced again
    link.close()
    assert cache.on_delete is None
    parent.close()


async def test_the_parent_gone_stops_the_worker() -> None:
    ours, parent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = PeerLink(ours)
    gone = asyncio.Event()
    link.on_parent_gone = gone.set
    link.attach(TieredCache(MemoryLRU(1 << 20)))
    parent.close()
    await asyncio.wait_for(gone.wait(), 5)
    link.close()


async def test_an_announcement_the_parent_cannot_take_is_counted_not_raised() -> None:
    ours, parent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cache = TieredCache(MemoryLRU(1 << 20))
    link = PeerLink(ours)
    link.attach(cache)
    parent.close()
    await asyncio.sleep(0.05)
    await cache.delete("k")  # must not raise: the delete itself happened
    assert link.num_dropped == 1
    link.close()


# --- config -----------------------------------------------------------------------------------


def test_workers_are_read_from_the_server_table_and_bounded() -> None:
    assert parse_config({"server": {"workers": 3}}, {}).server.num_workers == 3
    assert parse_config({}, {}).server.num_workers == 1
    with pytest.raises(ConfigError, match="workers"):
        parse_config({"server": {"workers": 0}}, {})
    with pytest.raises(ConfigError, match="workers"):
        parse_config({"server": {"workers": 1000}}, {})


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flag_beats_the_environment() -> None:
    assert run.resolve_config(_args("--workers", "2"), {}).server.num_workers == 2
    assert run.resolve_config(_args(), {"HASTEN_WORKERS": "4"}).server.num_workers == 4
    env = {"HASTEN_WORKERS": "4"}
    assert run.resolve_config(_args("--workers", "2"), env).server.num_workers == 2
    with pytest.raises(ConfigError, match="HASTEN_WORKERS"):
        run.resolve_config(_args(), {"HASTEN_WORKERS": "many"})
    with pytest.raises(ConfigError, match="--workers"):
        run.resolve_config(_args("--workers", "0"), {})


def test_semantic_with_workers_needs_the_shared_redis_tier() -> None:
    config = parse_config({"server": {"workers": 2}}, {})
    check_workers(config)  # no semantic tier: fine
    semantic = parse_config({"server": {"workers": 2}, "semantic": {"enabled": True}}, {})
    assert isinstance(semantic.semantic, SemanticConfig) and semantic.semantic.is_enabled
    with pytest.raises(ConfigError, match="Redis"):
        check_workers(semantic)
    check_workers(parse_config({"semantic": {"enabled": True}}, {}))  # one worker: fine


def test_a_metrics_port_with_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match="metrics"):
        check_workers(parse_config({"server": {"workers": 2}, "metrics": {"port": 9464}}, {}))
    check_workers(parse_config({"metrics": {"port": 9464}}, {}))


# --- real processes ---------------------------------------------------------------------------


class _Conn:
    """One kept-alive connection: it stays with the worker that accepted it."""

    def __init__(self, port: int) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=20)

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        headers = {"content-type": "application/json"}
        if path.startswith("/admin/"):
            headers["authorization"] = f"Bearer {ADMIN_KEY}"
        data = None if body is None else json.dumps(body)
        self.http.request(method, path, body=data, headers=headers)
        response = self.http.getresponse()
        raw = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw)

    def pid(self) -> int:
        status, _, body = self.call("GET", "/readyz")
        assert status == 200
        return int(body["worker"]["pid"])


def _one_per_worker(port: int, num_workers: int, timeout_s: float = 60.0) -> dict[int, _Conn]:
    """A connection on each worker (new connections land on whichever accepts first)."""
    by_pid: dict[int, _Conn] = {}
    deadline = time.monotonic() + timeout_s
    while len(by_pid) < num_workers:
        assert time.monotonic() < deadline, f"saw only workers {sorted(by_pid)}"
        conn = _Conn(port)
        try:
            pid = conn.pid()
        except OSError:
            time.sleep(0.05)
            continue
        if pid in by_pid:
            conn.http.close()
        else:
            by_pid[pid] = conn
    return by_pid


def _gateway_config(tmp_path: Path, upstream_url: str) -> Path:
    path = tmp_path / "hasten.toml"
    path.write_text(
        f'[server]\nworkers = 2\nadmin_api_key_env = "WORKERS_ADMIN_KEY"\n'
        f'[upstreams.sim]\nurl = "{upstream_url}/v1"\n'
        f'[models.sim-model]\nupstream = "sim"\n'
        f'[cache]\nbackend = "sqlite"\nsqlite_path = "{tmp_path / "cache.sqlite3"}"\n'
    )
    return path


def test_a_delete_on_one_worker_reaches_the_other_workers_l1(tmp_path: Path) -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as sim:
        config = _gateway_config(tmp_path, sim.url)
        env = {"WORKERS_ADMIN_KEY": ADMIN_KEY}
        with GatewayProcess("--config", str(config), env=env) as gateway:
            (pid_a, a), (pid_b, b) = _one_per_worker(gateway.port, 2).items()
            assert pid_a != pid_b and gateway.proc is not None
            assert gateway.proc.pid not in (pid_a, pid_b)  # the parent serves no request
            body = chat_body("Which worker answers?", temperature=0)
            status, headers, first = a.call("POST", "/v1/chat/completions", body)
            assert status == 200 and headers["x-hasten-cache"] == "miss"
            key = headers["x-hasten-cache-key"]
            # B finds it in the shared SQLite file and keeps a copy in its own L1.
            deadline = time.monotonic() + 20
            while True:
                _, headers, again = b.call("POST", "/v1/chat/completions", body)
                if headers["x-hasten-cache"] == "hit":
                    break
                assert time.monotonic() < deadline, "the L2 write never became visible"
                time.sleep(0.05)
            assert again["choices"] == first["choices"]
            status, _, deleted = a.call("POST", "/admin/cache/invalidate", {"key": key})
            assert status == 200 and deleted["exact_deleted"] == 1
            # Without the relay B's L1 would serve the deleted answer until its TTL.
            deadline = time.monotonic() + 10
            while True:
                _, headers, _ = b.call("POST", "/v1/chat/completions", body)
                if headers["x-hasten-cache"] == "miss":
                    break
                assert time.monotonic() < deadline, "worker B still serves the deleted answer"
                time.sleep(0.05)


def test_a_killed_worker_is_restarted_and_a_stop_ends_every_worker(tmp_path: Path) -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as sim:
        config = _gateway_config(tmp_path, sim.url)
        env = {"WORKERS_ADMIN_KEY": ADMIN_KEY}
        gateway = GatewayProcess("--config", str(config), env=env).start()
        try:
            conns = _one_per_worker(gateway.port, 2)
            victim, survivor = list(conns)
            os.kill(victim, signal.SIGKILL)
            assert conns[survivor].pid() == survivor  # the other worker serves on
            pids: set[int] = set()
            deadline = time.monotonic() + 60
            while victim in pids or len(pids) < 2:
                assert time.monotonic() < deadline, f"no replacement worker: {pids}"
                try:
                    pids = set(_one_per_worker(gateway.port, 2, timeout_s=5.0))
                except AssertionError:
                    pids = set()
            assert survivor in pids
            assert "exited (SIGKILL (signal 9)): restarting it" in gateway.stderr, gateway.stderr
        finally:
            gateway.stop()
        assert gateway.proc is not None and gateway.proc.returncode == 0
        for pid in (*conns, *pids):
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # no orphan worker keeps the port

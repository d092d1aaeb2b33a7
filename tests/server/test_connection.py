"""Hostile clients on raw sockets: huge heads, long URLs, slowloris, too many connections.

Against a real gateway on loopback (uvicorn with hasten's connection protocol, the simulator
as upstream). Time bounds are generous: "closed within 30 s" for a 1 s timeout.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from hasten.config import GatewayConfig, ServerConfig, parse_config
from hasten.errors import ConfigError
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import GatewayProcess, ServerThread

WAIT_S = 30.0
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _config(sim: ServerThread, **limits: Any) -> GatewayConfig:
    config = make_config({"sim": sim.url + "/v1"})
    return replace(config, server=replace(config.server, **limits))


@pytest.fixture(scope="module")
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    config = _config(sim, header_timeout_s=1.0, body_timeout_s=1.0, max_connections_per_client=0)
    with running_gateway(config) as server:
        yield server


def _connect(server: ServerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (bounded by WAIT_S per read)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _parse(raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, json.loads(body) if body else {}


def _assert_openai_error(raw: bytes, status: int, code: str) -> None:
    got, headers, body = _parse(raw)
    assert got == status, raw[:300]
    assert headers["content-type"] == "application/json"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code


def _send_until_refused(sock: socket.socket, head: bytes, filler: bytes, total: int) -> None:
    """Sends ``head`` then ``filler`` until ``total`` bytes or the server stops reading."""
    try:
        sock.sendall(head)
        sent = 0
        while sent < total:
            sock.sendall(filler)
            sent += len(filler)
        sock.sendall(b"\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass


# --- sizes ----------------------------------------------------------------------------------


def test_huge_header_is_431_before_it_is_buffered(gateway: ServerThread) -> None:
    with _connect(gateway) as sock:
        head = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: "
        _send_until_refused(sock, head, b"a" * MiB, 64 * MiB)
        _assert_openai_error(_read_until_closed(sock), 431, "headers_too_large")


def test_head_in_one_read_is_measured_exactly(gateway: ServerThread) -> None:
    # Many headers just over 64 KiB in total, sent at once: no single read is large.
    lines = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 1000) for i in range(70))
    with _connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + lines + b"\r\n")
        _assert_openai_error(_read_until_closed(sock), 431, "headers_too_large")
    ok = httpx.get(f"{gateway.url}/healthz", headers={f"x-h{i}": "v" * 1000 for i in range(60)})
    assert ok.status_code == 200


def test_long_url_is_414(gateway: ServerThread) -> None:
    response = httpx.get(f"{gateway.url}/v1/{'a' * 9000}")
    assert response.status_code == 414
    assert response.json()["error"]["code"] == "url_too_long"
    assert httpx.get(f"{gateway.url}/v1/{'a' * 7000}").status_code == 404  # under: routed


def test_limits_are_configurable(sim: ServerThread) -> None:
    config = _config(sim, max_header_bytes=2048, max_url_bytes=256)
    with running_gateway(config) as gateway:
        assert httpx.get(f"{gateway.url}/healthz", headers={"x": "v" * 3000}).status_code == 431
        assert httpx.get(f"{gateway.url}/{'a' * 300}").status_code == 414
        assert httpx.get(f"{gateway.url}/healthz", headers={"x": "v" * 1000}).status_code == 200


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_header_bytes", 10, "server.max_header_bytes: must be >= 1024, got 10"),
        ("max_url_bytes", 0, "server.max_url_bytes: must be >= 64, got 0"),
        ("header_timeout_s", 0, "server.header_timeout_s: must be > 0, got 0"),
        ("body_timeout_s", -1, "server.body_timeout_s: must be > 0, got -1"),
        ("max_connections_per_client", -1, "server.max_connections_per_client: must be >= 0"),
    ],
)
def test_check_config_validates_the_limits(key: str, value: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"server": {key: value}}, {})
    parsed = parse_config({"server": {key: 4096}}, {}).server
    assert getattr(parsed, key) == 4096
    assert ServerConfig().max_header_bytes == 64 * 1024 and ServerConfig().max_url_bytes == 8192


def _memory_bytes(pid: int, field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of a process."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def test_concurrent_huge_headers_leave_memory_flat(tmp_path: Any) -> None:
    with GatewayProcess("--simulator", "--no-cache") as gateway:
        assert gateway.proc is not None
        httpx.get(f"{gateway.url}/healthz", timeout=WAIT_S)
        before = _memory_bytes(gateway.proc.pid, "VmRSS")

        def attack() -> None:
            with socket.create_connection(("127.0.0.1", gateway.port), timeout=WAIT_S) as sock:
                head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: "
                _send_until_refused(sock, head, b"b" * MiB, 48 * MiB)
                _read_until_closed(sock)

        threads = [threading.Thread(target=attack) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert httpx.get(f"{gateway.url}/healthz", timeout=WAIT_S).status_code == 200
        after = _memory_bytes(gateway.proc.pid, "VmRSS")
        peak = _memory_bytes(gateway.proc.pid, "VmHWM")
    if os.environ.get("HASTEN_PRINT_RSS"):
        print(f"RSS before {before / MiB:.1f} MiB, peak {peak / MiB:.1f}, after {after / MiB:.1f}")
    # Six 48 MiB heads are 288 MiB; refused after 64 KiB each, they cost next to nothing.
    assert peak - before < 32 * MiB, (before, peak)
    assert after - before < 32 * MiB, (before, after)


# --- read timeouts --------------------------------------------------------------------------


def _trickle(sock: socket.socket, head: bytes, byte: bytes, stop: threading.Event) -> None:
    try:
        sock.sendall(head)
        while not stop.wait(0.3):
            sock.sendall(byte)
    except OSError:
        pass


def _slowloris(server: ServerThread, head: bytes, byte: bytes, num: int = 10) -> list[bytes]:
    """``num`` connections sending ``head`` then one byte per 0.3 s; what each got back."""
    socks = [_connect(server) for _ in range(num)]
    stop = threading.Event()
    threads = [threading.Thread(target=_trickle, args=(s, head, byte, stop)) for s in socks]
    for thread in threads:
        thread.start()
    try:
        return [_read_until_closed(s) for s in socks]
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for sock in socks:
            sock.close()


def test_slow_headers_are_cut_off(gateway: ServerThread) -> None:
    started_s = time.monotonic()
    answers = _slowloris(gateway, b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ", b"a")
    assert time.monotonic() - started_s < WAIT_S
    for raw in answers:
        _assert_openai_error(raw, 408, "request_timeout")


def test_silent_connection_is_closed(gateway: ServerThread) -> None:
    with _connect(gateway) as sock:
        _assert_openai_error(_read_until_closed(sock), 408, "request_timeout")


def test_slow_body_is_cut_off(gateway: ServerThread) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n{"
    )
    started_s = time.monotonic()
    answers = _slowloris(gateway, head, b" ")
    assert time.monotonic() - started_s < WAIT_S
    for raw in answers:
        _assert_openai_error(raw, 408, "request_timeout")
    assert httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body()).status_code == 200


def test_keep_alive_requests_each_get_their_own_header_timeout(gateway: ServerThread) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        for _ in range(3):
            assert client.get("/healthz").status_code == 200
            time.sleep(0.7)  # under the 1 s header timeout, over it in sum


# --- connections per client -----------------------------------------------------------------


def test_connections_per_client_are_capped(sim: ServerThread) -> None:
    config = _config(sim, max_connections_per_client=3, header_timeout_s=WAIT_S)
    with running_gateway(config) as gateway:
        held = [_connect(gateway) for _ in range(3)]
        try:
            with _connect(gateway) as extra:
                extra.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                _assert_openai_error(_read_until_closed(extra), 429, "too_many_connections")
            held.pop().close()
            deadline = time.monotonic() + WAIT_S
            while True:  # the server notices the close asynchronously
                response = httpx.get(f"{gateway.url}/healthz", timeout=WAIT_S)
                if response.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert response.status_code == 200
        finally:
            for sock in held:
                sock.close()

"""The engine child and its supervisor: restart decisions (pure), llama-server's flags, fake
engine commands that crash (no llama.cpp), and the real llama-server killed under a running
gateway."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from hasten.config.local import EngineConfig
from hasten.errors import ModelFileNotFound
from hasten.local.command import server_arguments
from hasten.local.supervisor import (
    EngineSupervisor,
    RestartPolicy,
    RestartSettings,
    describe_exit,
)
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.servers import GatewayProcess, ServerThread

# --- decisions ---------------------------------------------------------------------------


def test_restart_backoff_doubles_and_resets_after_a_stable_run() -> None:
    policy = RestartPolicy(RestartSettings(backoff_base_s=0.5, backoff_max_s=3.0))
    delays = [policy.on_exit(now_s=100.0 + 70.0 * i, uptime_s=1.0) for i in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.on_exit(now_s=1000.0, uptime_s=120.0) == 0.5


def test_restarts_are_capped_per_minute() -> None:
    policy = RestartPolicy(RestartSettings(max_restarts_per_minute=3))
    assert all(policy.on_exit(now_s=float(i), uptime_s=0.1) is not None for i in range(3))
    assert policy.on_exit(now_s=3.0, uptime_s=0.1) is None
    # A minute later the window has room again.
    assert policy.on_exit(now_s=70.0, uptime_s=0.1) is not None


def test_exit_descriptions_name_the_signal() -> None:
    assert describe_exit(-signal.SIGSEGV) == "SIGSEGV (signal 11)"
    assert describe_exit(-signal.SIGKILL) == "SIGKILL (signal 9)"
    assert describe_exit(3) == "exit code 3"


def test_server_arguments_carry_the_config(tmp_path: Path) -> None:
    model = tmp_path / "x.gguf"
    model.write_bytes(b"GGUF")
    config = EngineConfig(
        model_path=model, n_ctx=2048, n_threads=3, max_seqs=5, cache_ram_mib=64, spec_ngram_max=16
    )
    args = server_arguments(config, "127.0.0.1", 9999)
    flags = dict(itertools.pairwise(args))
    assert (flags["--model"], flags["--alias"], flags["--port"]) == (str(model), "local", "9999")
    assert (flags["--ctx-size"], flags["--parallel"], flags["--threads"]) == ("2048", "5", "3")
    assert (flags["--cache-ram"], flags["--n-predict"]) == ("64", "512")
    assert {"--kv-unified", "--jinja", "--metrics"} <= set(args)
    assert (flags["--spec-type"], flags["--spec-ngram-simple-size-m"]) == ("ngram-simple", "16")
    assert "--spec-type" not in server_arguments(replace(config, spec_ngram_max=0), "h", 1)
    with pytest.raises(ModelFileNotFound, match="GGUF model not found"):
        server_arguments(EngineConfig(model_path=tmp_path / "missing.gguf"), "h", 1)


# --- the supervisor with fake engines ----------------------------------------------------

# A stand-in llama-server: /health, then one self-test completion, then exit code 3.
READY_THEN_EXIT = """
import http.server, json, os, sys, threading
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self._send({"content": "!"})
        threading.Timer(0.05, lambda: os._exit(3)).start()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
SELF_TEST_SEGFAULT = """
import os, signal, sys
print("system_info: n_threads = 1 | CPU : AVX2 = 1 |", flush=True)
os.kill(os.getpid(), signal.SIGSEGV)
"""


def _script(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return [sys.executable, str(path)]


async def test_a_child_that_keeps_dying_is_restarted_then_given_up(tmp_path: Path) -> None:
    command = _script(tmp_path, "flaky.py", READY_THEN_EXIT)
    restart = RestartSettings(backoff_base_s=0.01, max_restarts_per_minute=3)
    supervisor = EngineSupervisor(EngineConfig(), command=command, restart=restart).start()
    try:
        assert await supervisor.wait_first_outcome(30) == "ready"
        deadline = time.monotonic() + 30
        while not supervisor.state.startswith("failed"):
            assert time.monotonic() < deadline, supervisor.state
            await asyncio.sleep(0.02)
        assert supervisor.num_restarts == 3
        assert supervisor.state == (
            "failed: crashed 4 times within a minute (last: exit code 3); "
            "restart hasten to try again"
        )
    finally:
        await supervisor.aclose()


async def test_a_self_test_crash_fails_at_once_and_says_why(tmp_path: Path) -> None:
    command = _script(tmp_path, "segv.py", SELF_TEST_SEGFAULT)
    supervisor = EngineSupervisor(EngineConfig(), command=command).start()
    try:
        state = await supervisor.wait_first_outcome(30)
        assert state.startswith("failed: self-test crashed with SIGSEGV (signal 11)")
        assert "CPU features seen:" in state and "llama.cpp built with: CPU : AVX2 = 1" in state
        assert "make clean-engine && make serve" in state
        assert supervisor.num_restarts == 0
    finally:
        await supervisor.aclose()


# --- the real engine under a running gateway ---------------------------------------------


@pytest.fixture(scope="module")
def cloud() -> Iterator[ServerThread]:
    with ServerThread(build_sim(SimConfig(ttft_base_ms=5))) as server:
        yield server


def _gateway_config(tmp_path: Path, cloud_url: str, local: str) -> str:
    path = tmp_path / "hasten.toml"
    path.write_text(
        f"""
[upstreams.cloud]
url = "{cloud_url}/v1"

[models."gpt-cloud"]
upstream = "cloud"

[cache]
backend = "memory"

[local]
{local}
"""
    )
    return str(path)


@dataclass
class StreamOutcome:
    text: str = ""
    error: str | None = None
    has_done: bool = False
    has_started: threading.Event = field(default_factory=threading.Event)


# A stream the engine is busy with for a while (700 tokens), never answered from the cache.
LONG_STREAM = {
    "model": "local",
    "messages": [{"role": "user", "content": "Write a very long essay about the sea."}],
    "max_tokens": 700,
    "temperature": 0,
    "stream": True,
}
NO_CACHE = {"cache-control": "no-cache, no-store"}


def _hold_stream(url: str, outcome: StreamOutcome) -> None:
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=LONG_STREAM, headers=NO_CACHE, timeout=60
        ) as response:
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    outcome.has_done = True
                elif '"error"' in line:
                    outcome.error = line
                elif '"content":"' in line and '"content":""' not in line:
                    outcome.text += line
                    outcome.has_started.set()
    except httpx.HTTPError as exc:
        outcome.error = repr(exc)
    finally:
        outcome.has_started.set()


def _wait_engine(
    gateway: GatewayProcess, predicate: str, timeout_s: float = 60
) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        engine: dict[str, object] = gateway.readyz()["engine"]
        if str(engine["state"]).startswith(predicate):
            return engine
        assert time.monotonic() < deadline, engine
        time.sleep(0.05)


def _ask(url: str, model: str, question: str, max_tokens: int = 8) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGKILL])
def test_engine_crash_mid_stream_ends_only_local_requests(
    tmp_path: Path, cloud: ServerThread, signum: int
) -> None:
    local = "n_ctx = 4096\nn_threads = 1\nmax_seqs = 5\nrestart_backoff_s = 2.0"
    config = _gateway_config(tmp_path, cloud.url, local)
    with GatewayProcess("--config", config) as gateway:
        before = _wait_engine(gateway, "ready")
        cached = _ask(gateway.url, "local", "What is the capital of France?")
        assert cached.status_code == 200 and cached.headers["x-hasten-cache"] == "miss"
        non_stream: list[httpx.Response] = []
        long_question = "Write a very long essay about mountains."
        threads = [
            threading.Thread(
                target=lambda: non_stream.append(_ask(gateway.url, "local", long_question, 400)),
                daemon=True,
            )
        ]
        outcomes = [StreamOutcome() for _ in range(4)]
        threads += [
            threading.Thread(target=_hold_stream, args=(gateway.url, o), daemon=True)
            for o in outcomes
        ]
        for thread in threads:
            thread.start()
        for outcome in outcomes:
            assert outcome.has_started.wait(60)
        assert all(o.text and o.error is None for o in outcomes), [o.error for o in outcomes]
        os.kill(int(str(before["pid"])), signum)
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads), "a client hung"
        for outcome in outcomes:
            # A clean end: the final SSE event is an OpenAI-shaped error, not a cut socket.
            assert outcome.error is not None and '"message"' in outcome.error, outcome
            assert not outcome.has_done
        # The non-stream request in flight: a clean 502 in the OpenAI shape, not a hang.
        assert len(non_stream) == 1 and non_stream[0].status_code == 502, non_stream
        assert non_stream[0].json()["error"]["message"]
        down = _wait_engine(gateway, "restarting", timeout_s=5)
        assert down["state"] == "restarting (1)"
        assert down["last_exit"] == describe_exit(-signum)
        # During the outage: the cache and the cloud still answer.
        hit = _ask(gateway.url, "local", "What is the capital of France?")
        assert hit.status_code == 200 and hit.headers["x-hasten-cache"] == "hit"
        assert hit.json()["choices"] == cached.json()["choices"]
        assert _ask(gateway.url, "gpt-cloud", "Hello?").status_code == 200
        assert not str(gateway.readyz()["engine"]["state"]).startswith("ready")
        after = _wait_engine(gateway, "ready")
        assert after["pid"] != before["pid"] and after["restarts"] == 1
        again = _ask(gateway.url, "local", "Name a colour.")
        assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"]
        assert gateway.proc is not None and gateway.proc.poll() is None  # never restarted
    assert f"died: {describe_exit(-signum)}; restarting" in gateway.stderr


def test_a_self_test_crash_shows_in_readyz_and_the_banner(
    tmp_path: Path, cloud: ServerThread
) -> None:
    command = _script(tmp_path, "segv.py", SELF_TEST_SEGFAULT)
    local = f"command = {command!r}".replace("'", '"')
    with GatewayProcess("--config", _gateway_config(tmp_path, cloud.url, local)) as gateway:
        engine = gateway.readyz()["engine"]
        assert str(engine["state"]).startswith("failed: self-test crashed with SIGSEGV")
        deadline = time.monotonic() + 10
        while "hasten gateway on" not in gateway.stderr:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "upstream local: local engine failed: self-test crashed with SIGSEGV" in (
            gateway.stderr
        )
        assert "make clean-engine && make serve" in gateway.stderr
        assert _ask(gateway.url, "gpt-cloud", "Hello?").status_code == 200
        down = _ask(gateway.url, "local", "Hello?")
        assert down.status_code == 502 and down.json()["error"]["message"]


def _is_gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def test_the_engine_has_no_amx_kernels_and_dies_with_the_gateway(
    tmp_path: Path, cloud: ServerThread
) -> None:
    config = _gateway_config(tmp_path, cloud.url, "n_threads = 1\nmax_seqs = 2")
    with GatewayProcess("--config", config) as gateway:
        engine = _wait_engine(gateway, "ready")
        system_info = str(engine["system_info"])
        assert "CPU :" in system_info and "AMX_INT8 = 1" not in system_info
        assert engine["tools"] is False  # SmolLM2's chat template renders no tools
        pid = int(str(engine["pid"]))
        assert not _is_gone(pid)
        assert gateway.proc is not None
        gateway.proc.kill()  # no chance to stop its child: the kernel must
        gateway.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not _is_gone(pid):
            assert time.monotonic() < deadline, f"llama-server {pid} outlived the gateway"
            time.sleep(0.05)


def test_a_full_engine_answers_429_with_retry_after_and_frees_the_slot_on_hang_up(
    tmp_path: Path, cloud: ServerThread
) -> None:
    # llama-server would queue the second request without a bound; the gateway's cap for
    # upstream local (max_seqs + max_queue = 1) refuses it instead, and the cloud route,
    # which does not use the engine, is not held up by it.
    local = "n_ctx = 2048\nn_threads = 1\nmax_seqs = 1\nmax_queue = 0"
    with GatewayProcess("--config", _gateway_config(tmp_path, cloud.url, local)) as gateway:
        _wait_engine(gateway, "ready")
        url = gateway.url + "/v1/chat/completions"
        with httpx.stream("POST", url, json=LONG_STREAM, headers=NO_CACHE, timeout=60) as held:
            assert held.status_code == 200
            lines = held.iter_lines()  # kept: dropping the iterator would close the stream
            assert any('"content":"' in line for line in lines)  # generating
            refused = _ask(gateway.url, "local", "Name a colour.")
            cloud_answer = _ask(gateway.url, "gpt-cloud", "Hello?")
        # Hung up mid-stream: the slot comes back once the gateway sees it (bounded wait).
        deadline = time.monotonic() + 60
        while (again := _ask(gateway.url, "local", "Name a colour.")).status_code == 429:
            assert time.monotonic() < deadline, "the hung-up stream's slot never came back"
            time.sleep(0.1)
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "upstream_busy")
    assert cloud_answer.status_code == 200
    assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"]

"""Real loopback servers for tests: an ASGI app under uvicorn in a thread, redis-server,
the local engine child and the whole gateway as processes."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a background thread."""

    def __init__(
        self,
        app: Any,
        *,
        lifespan: Literal["auto", "on", "off"] = "auto",
        http: type[asyncio.Protocol] | Literal["httptools"] = "httptools",
    ) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets it knows are TCP.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan=lifespan, loop="asyncio", http=http
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def redis_server(port: int | None = None, workdir: str | None = None) -> Iterator[str]:
    """Starts a throwaway redis-server on a free loopback port; yields its redis:// URL.

    With ``workdir`` (and ``port``) the data is kept there (append-only file, fsync on every
    write), so a second server on the same port and directory comes back with it: Redis
    going away and returning.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: run scripts/ensure-redis.sh")
    is_kept = workdir is not None
    port = port if port is not None else free_port()
    workdir = workdir if workdir is not None else tempfile.mkdtemp(prefix="hasten-redis-")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if is_kept else "no",
            "--appendfsync",
            "always",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        try:
            is_up = wait_listening(proc, port, 10.0, poll_s=0.02)
        except TimeoutError:
            is_up = False
        if not is_up:
            raise RuntimeError("redis-server did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if not is_kept:
            shutil.rmtree(workdir, ignore_errors=True)


class ProcessDied(AssertionError):
    """A child server exited before it was ready (message: its signal or exit code)."""


def wait_listening(
    proc: subprocess.Popen[Any], port: int, timeout_s: float, poll_s: float = 0.05
) -> bool:
    """Waits until something accepts on 127.0.0.1:``port``: True; False if ``proc`` exited
    first. Raises ``TimeoutError`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port}") from None
            time.sleep(poll_s)


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


class EngineProcess:
    """llama-server with hasten's ``[local]`` settings (``hasten local``'s flags), in its own
    process as ``hasten serve`` runs it: a native crash fails only the tests that needed it.

    Ready once ``/health`` answers 200; ``health()`` gives the engine's counters from its
    ``/metrics`` (``num_running``, ``num_waiting``, ``num_decoded_tokens``, ``num_steps``).
    """

    def __init__(self, *flags: str, ready_timeout_s: float = 120.0) -> None:
        from hasten.local.command import server_command
        from hasten.local.server import add_arguments, resolve_config

        parser = argparse.ArgumentParser()
        add_arguments(parser)
        config = resolve_config(parser.parse_args(list(flags)))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = server_command(config.engine, "127.0.0.1", self.port)
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: list[bytes] = []

    def start(self) -> EngineProcess:
        from hasten.local.command import CHILD_ENV
        from hasten.local.supervisor import die_with_parent

        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **CHILD_ENV},
            preexec_fn=die_with_parent,
        )
        # Keep draining its log so the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ProcessDied("engine child not ready in time")
            time.sleep(0.05)

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)

    def health(self) -> dict[str, int]:
        from hasten.metrics.endpoint import engine_stats

        self.check_alive()
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            return engine_stats(response.read().decode())

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = b"".join(self.log[-20:]).decode(errors="replace")
            raise ProcessDied(f"engine child died: {_exit_text(self.proc.returncode)}\n{tail}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class GatewayProcess:
    """``hasten serve`` as its own process, as a user runs it (engine child included)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "hasten", "serve", "--port", str(self.port), *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_lines: list[str] = []

    def start(self, timeout_s: float = 180.0) -> GatewayProcess:
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env
        )
        threading.Thread(target=self._drain, daemon=True).start()
        try:
            if wait_listening(self.proc, self.port, timeout_s):
                return self
        except TimeoutError:
            raise ProcessDied(f"gateway did not start\n{self.stderr}") from None
        raise ProcessDied(f"gateway exited: {_exit_text(self.proc.returncode)}\n{self.stderr}")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def readyz(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/readyz", timeout=10) as response:
            body: dict[str, Any] = json.loads(response.read())
            return body

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SimulatorProcess:
    """``hasten simulate`` as its own process with the given flags, as a user starts it."""

    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.command = [sys.executable, "-m", "hasten", "simulate", "--port", str(self.port)]
        self.command += list(flags)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> SimulatorProcess:
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        try:
            if wait_listening(self.proc, self.port, timeout_s):
                return self
        except TimeoutError:
            self.stop()
            raise ProcessDied("simulator did not start") from None
        raise ProcessDied(f"simulator exited: {_exit_text(self.proc.returncode)}")

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen[str] | subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 20 s; nothing if it already has."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)

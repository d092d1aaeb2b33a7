"""The local engine, llama.cpp's own ``llama-server``, as a supervised child of the gateway.

Why a process: llama.cpp is native code, and a native crash (a bad kernel for this CPU, an
abort, the OOM killer) must end only the local requests then in flight, never the gateway.
The child is ``llama-server`` on a loopback port with flags from ``[local]``
(``hasten.local.command``). It is ready once its ``/health`` answers 200 and a one-token
completion (the self-test) came back: a bad kernel for this CPU crashes there, not on a
user's first request. The gateway reaches it as upstream ``local`` over HTTP like any other
upstream, so while the child is down its port refuses connections and the router's
failover and breaker do the rest. The child dies with the gateway: the kernel sends it
SIGKILL when the gateway's process ends (``PR_SET_PDEATHSIG``), however that ends.

``RestartPolicy`` decides (pure: times are passed in); ``EngineSupervisor`` executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import pathlib
import signal
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from hasten.config.local import EngineConfig
from hasten.errors import EngineNotBuilt, ModelFileNotFound
from hasten.local.command import (
    CHILD_ENV,
    parse_system_info,
    server_command,
    system_info_command,
)

_log = logging.getLogger("hasten.local")

DEFAULT_START_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0
HEALTH_POLL_S = 0.05
HTTP_TIMEOUT_S = 60.0  # the self-test's one token, on a loaded machine
LOG_TAIL_LINES = 40  # the child's last lines, logged when it dies
PR_SET_PDEATHSIG = 1
SELF_TEST = {"prompt": "Hi", "n_predict": 1, "temperature": 0.0, "cache_prompt": False}
REBUILD_ADVICE = (
    "run `make clean-engine && make serve` to rebuild llama.cpp for this CPU, "
    "or point [local] model_path at another GGUF"
)


@dataclass(frozen=True, slots=True)
class RestartSettings:
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    max_restarts_per_minute: int = 5
    # A child that stayed up this long resets the backoff: its crash is a new incident.
    stable_after_s: float = 60.0


class RestartPolicy:
    """How long to wait before the next start, or None once restarts are used up."""

    def __init__(self, settings: RestartSettings = RestartSettings()) -> None:
        self.settings = settings
        self._restarts_s: deque[float] = deque()
        self._num_consecutive = 0

    def on_exit(self, now_s: float, uptime_s: float) -> float | None:
        if uptime_s >= self.settings.stable_after_s:
            self._num_consecutive = 0
        while self._restarts_s and now_s - self._restarts_s[0] > 60.0:
            self._restarts_s.popleft()
        if len(self._restarts_s) >= self.settings.max_restarts_per_minute:
            return None
        self._restarts_s.append(now_s)
        delay_s = self.settings.backoff_base_s * (2.0**self._num_consecutive)
        self._num_consecutive += 1
        return min(delay_s, self.settings.backoff_max_s)

    @property
    def num_restarts_last_minute(self) -> int:
        return len(self._restarts_s)


def describe_exit(returncode: int) -> str:
    """``SIGSEGV (signal 11)`` or ``exit code 3``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return f"{name} (signal {-returncode})"
    return f"exit code {returncode}"


def cpu_features() -> str:
    """The CPU features that decide which llama.cpp kernels can run here."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8")
    return " ".join(flag for flag in wanted if flag in flags) or "no AVX2"


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL when the gateway's process ends."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def http_exchange(
    port: int, method: str, path: str, body: object = None, timeout_s: float = HTTP_TIMEOUT_S
) -> tuple[int, bytes]:
    """One HTTP/1.1 request to 127.0.0.1:``port`` on its own connection: status and body."""
    payload = b"" if body is None else orjson.dumps(body)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(head.encode() + payload)
            await writer.drain()
            raw = await reader.read(-1)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    status_line, _, rest = raw.partition(b"\r\n")
    parts = status_line.split(b" ")
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP answer: {status_line[:80]!r}")
    return int(parts[1]), rest.partition(b"\r\n\r\n")[2]


def _template_takes_tools(props: bytes) -> bool:
    """llama-server's ``/props``: does the model's chat template render tools (else it
    would answer a request with tools in plain text, as if it had none)?"""
    try:
        caps = orjson.loads(props).get("chat_template_caps", {})
    except (orjson.JSONDecodeError, AttributeError):
        return False
    return isinstance(caps, dict) and caps.get("supports_tools") is True


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngineSupervisor:
    """Starts, watches and restarts the engine child; ``state`` says where it stands.

    States: ``starting``, ``ready``, ``restarting (n)``, ``failed: <reason>``, ``stopped``.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        command: Sequence[str] | None = None,
        port: int | None = None,
        restart: RestartSettings = RestartSettings(),
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        self.port = port or free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.base_command = tuple(command or ())
        self.config = config
        self.command: list[str] = []
        self.policy = RestartPolicy(restart)
        self.start_timeout_s = start_timeout_s
        self.state = "starting"
        self.num_restarts = 0
        self.last_exit: str | None = None
        self.info: dict[str, object] = {}
        self.pid: int | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_outcome = asyncio.Event()
        self._is_stopping = False
        self._log_tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    @property
    def is_ready(self) -> bool:
        return self.state == "ready"

    def status(self) -> dict[str, object]:
        """For ``/readyz`` and the banner; never contains a secret."""
        status: dict[str, object] = {"state": self.state, "restarts": self.num_restarts}
        if self.last_exit is not None:
            status["last_exit"] = self.last_exit
        status.update(self.info)
        return status

    def start(self) -> EngineSupervisor:
        self._task = asyncio.get_running_loop().create_task(self._supervise())
        return self

    async def wait_first_outcome(self, timeout_s: float | None = None) -> str:
        """Waits until the first child is ready or has failed; returns the state."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_outcome.wait(), timeout_s)
        return self.state

    async def aclose(self) -> None:
        self._is_stopping = True
        await self._stop_child()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state = "stopped"

    async def _supervise(self) -> None:
        has_been_ready = False
        while not self._is_stopping:
            started_s = time.monotonic()
            returncode = await self._run_once()
            if self._is_stopping:
                return
            has_been_ready = has_been_ready or self.info.get("ready_s") is not None
            self.last_exit = describe_exit(returncode)
            uptime_s = time.monotonic() - started_s
            if not has_been_ready:
                self._fail(f"self-test crashed with {self.last_exit}", with_advice=True)
                return
            delay_s = self.policy.on_exit(time.monotonic(), uptime_s)
            if delay_s is None:
                self._fail(
                    f"crashed {self.policy.num_restarts_last_minute + 1} times within a minute "
                    f"(last: {self.last_exit}); restart hasten to try again"
                )
                return
            self.num_restarts += 1
            self.state = f"restarting ({self.num_restarts})"
            _log.error(
                "local engine (pid %s) died: %s; restarting in %.1f s (restart %d)",
                self.pid,
                self.last_exit,
                delay_s,
                self.num_restarts,
            )
            await asyncio.sleep(delay_s)

    async def _run_once(self) -> int:
        """Runs one child until it exits; returns its return code."""
        self.info.pop("ready_s", None)
        self._log_tail.clear()
        try:
            self.command = server_command(self.config, "127.0.0.1", self.port, self.base_command)
            if not self.base_command and "system_info" not in self.info:
                await self._probe_system_info(self.command[0])
            process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **CHILD_ENV},
                start_new_session=True,  # a Ctrl-C to the gateway is the gateway's to handle
                preexec_fn=die_with_parent,
            )
        except (OSError, EngineNotBuilt, ModelFileNotFound) as exc:
            self._fail(f"cannot start the engine: {exc}")
            self._is_stopping = True
            return 1
        self._process, self.pid = process, process.pid
        assert process.stdout is not None
        reader = asyncio.create_task(self._read_log(process.stdout))
        starter = asyncio.create_task(self._become_ready(process))
        try:
            returncode = await process.wait()
        finally:
            starter.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starter
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(reader, 1.0)
        if not self._is_stopping and self._log_tail:
            _log.error("local engine's last output:\n%s", "\n".join(self._log_tail))
        return returncode

    async def _probe_system_info(self, binary: str) -> None:
        """What the built llama.cpp says about this CPU (no AMX, the AVX tier), for the
        banner, /readyz and a crash's advice; never fatal."""
        try:
            probe = await asyncio.create_subprocess_exec(
                *system_info_command(binary),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        except OSError:
            return
        try:
            output, _ = await asyncio.wait_for(probe.communicate(), 10.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                probe.kill()
            await probe.wait()
            return
        if (info := parse_system_info(output.decode(errors="replace"))) is not None:
            self.info["system_info"] = info

    async def _become_ready(self, process: asyncio.subprocess.Process) -> None:
        """Waits for /health, runs the self-test, then reports ready; a child that does
        neither in time (a hung model load) is killed, so its failure is reported instead
        of a gateway that waits forever."""
        started_s = time.perf_counter()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                while True:
                    with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                        status, _ = await http_exchange(self.port, "GET", "/health", None, 5.0)
                        if status == 200:
                            break
                    await asyncio.sleep(HEALTH_POLL_S)
                test_started_s = time.perf_counter()
                status, body = await http_exchange(self.port, "POST", "/completion", SELF_TEST)
                if status != 200:
                    raise ConnectionError(f"self-test answered {status}: {body[:200]!r}")
                self_test_ms = round((time.perf_counter() - test_started_s) * 1000.0, 1)
                status, props = await http_exchange(self.port, "GET", "/props", None, 5.0)
        except (TimeoutError, OSError, ConnectionError) as exc:
            _log.error(
                "local engine not ready after %.0f s (%s): killing it",
                time.perf_counter() - started_s,
                exc or type(exc).__name__,
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            return
        self.info["tools"] = status == 200 and _template_takes_tools(props)
        self._on_ready(self_test_ms)

    async def _read_log(self, stdout: asyncio.StreamReader) -> None:
        # llama-server logs every request: its lines go to the debug log and a short tail
        # is kept for the crash report; the CPU features it was built with are kept too.
        while line := await stdout.readline():
            text = line.decode(errors="replace").rstrip()
            self._log_tail.append(text)
            _log.debug("llama-server: %s", text)
            if (info := parse_system_info(text)) is not None:
                self.info["system_info"] = info

    def _on_ready(self, self_test_ms: float) -> None:
        engine = self.config.resolved()
        self.info.update(
            model=self.command[self.command.index("--model") + 1].rsplit("/", 1)[-1],
            n_threads=engine.n_threads,
            max_seqs=engine.max_seqs,
            n_ctx=engine.n_ctx,
            self_test_ms=self_test_ms,
            pid=self.pid,
            ready_s=time.time(),
        )
        if self.state != "ready":
            _log.info("local engine ready (pid %s)", self.pid)
        self.state = "ready"
        self._first_outcome.set()

    def _fail(self, reason: str, *, with_advice: bool = False) -> None:
        detail = reason
        if with_advice:
            built = self.info.get("system_info")
            seen = f"CPU features seen: {cpu_features()}"
            if built:
                seen += f"; llama.cpp built with: {built}"
            detail = f"{reason} ({seen}); {REBUILD_ADVICE}"
        self.state = f"failed: {detail}"
        _log.error("local engine %s", self.state)
        self._first_outcome.set()

    async def _stop_child(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

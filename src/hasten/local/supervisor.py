"""The local engine as a supervised child process of the gateway.

Why a process: llama.cpp is native code, and a native crash (a bad kernel for this CPU, an
abort, the OOM killer) must end only the local requests then in flight, never the gateway.
The child is ``hasten local --supervised``: it loads the model, runs a one-token self-test,
binds its loopback port and then reports ``ready`` on stdout. The gateway reaches it as
upstream ``local`` over HTTP like any other upstream, so while the child is down its port
refuses connections and the router's failover and breaker do the rest.

``RestartPolicy`` decides (pure: times are passed in); ``EngineSupervisor`` executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields

import orjson

from hasten.config.local import EngineConfig

_log = logging.getLogger("hasten.local")

# A child's stdout line starting with this carries one JSON event for the supervisor.
EVENT_PREFIX = b"hasten-engine: "
DEFAULT_START_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0
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


def engine_arguments(config: EngineConfig) -> list[str]:
    """Command-line flags that make ``hasten local`` run exactly this engine config."""
    args: list[str] = []
    defaults = EngineConfig()
    for item in fields(EngineConfig):
        value = getattr(config, item.name)
        if value is None or value == getattr(defaults, item.name):
            continue
        args += [f"--{item.name.replace('_', '-')}", str(value)]
    return args


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
        base = list(command) if command else [sys.executable, "-m", "hasten", "local"]
        self.command = [
            *base,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--supervised",
            "--any-model",
            *engine_arguments(config),
        ]
        self.config = config
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
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,  # the child exits when this pipe closes
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C to the gateway is the gateway's to handle
            )
        except OSError as exc:
            self._fail(f"cannot start {self.command[0]}: {exc}")
            self._is_stopping = True
            return 1
        self._process, self.pid = process, process.pid
        assert process.stdout is not None
        reader = asyncio.create_task(self._read_events(process.stdout))
        watchdog = asyncio.create_task(self._start_watchdog(process))
        try:
            return await process.wait()
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _start_watchdog(self, process: asyncio.subprocess.Process) -> None:
        # A child that neither gets ready nor dies (a hung model load) is killed, so its
        # failure is reported instead of a gateway that waits forever.
        await asyncio.sleep(self.start_timeout_s)
        if self.info.get("ready_s") is None and process.returncode is None:
            _log.error("local engine not ready after %.0f s: killing it", self.start_timeout_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    async def _read_events(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            if not line.startswith(EVENT_PREFIX):
                sys.stderr.write(line.decode(errors="replace"))
                continue
            try:
                event = orjson.loads(line[len(EVENT_PREFIX) :])
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict):
                self._on_event(event)

    def _on_event(self, event: dict[str, object]) -> None:
        kind = event.get("event")
        if kind == "system_info":
            self.info["system_info"] = str(event.get("system_info", ""))
        elif kind == "ready":
            for key in ("model", "n_threads", "max_seqs", "n_ctx", "self_test_ms"):
                if key in event:
                    self.info[key] = event[key]
            self.info["pid"] = self.pid
            self.info["ready_s"] = time.time()
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

"""A server under benchmark as a child process: start, wait until healthy, measure, stop.

Each server gets its own session (process group) so stopping it also stops anything it
spawned; memory is summed over the whole process tree for the same reason.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POLL_INTERVAL_S = 0.1
STOP_GRACE_S = 10.0


def clean_environment() -> dict[str, str]:
    """No HASTEN_* or provider keys leak in from the caller's shell and change behaviour."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("HASTEN_") and name != "OPENAI_API_KEY"
    }


def invocation(argv: list[str]) -> str:
    """The command line that ran this benchmark, with paths relative to the repository."""

    def relative(path: str) -> str:
        absolute = Path(path).absolute()
        return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else path

    return shlex.join([relative(sys.executable), relative(sys.argv[0]), *argv])


@contextlib.contextmanager
def rev_source(rev: str, parent: Path) -> Iterator[Path]:
    """The ``src/`` of commit ``rev``, checked out in a git worktree under ``parent`` (removed
    afterwards): put it on PYTHONPATH to run that commit's server beside this checkout's."""
    tree = parent / "rev"
    adding = ["git", "worktree", "add", "--detach", "-q", str(tree), rev]
    subprocess.run(adding, cwd=REPO, check=True)
    try:
        yield tree / "src"
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0
        self.ready_after_s: float | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None, f"{self.name} was not started"
        return self._process.pid

    def start(self) -> ServerProcess:
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        self.started_s = time.perf_counter()
        return self

    def wait_ready(
        self, url: str, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> None:
        """Polls ``url`` until it answers 200; raises with the log's tail if it never does."""
        assert self._process is not None
        deadline_s = time.perf_counter() + timeout_s
        request = urllib.request.Request(url, headers=dict(headers or {}))
        while time.perf_counter() < deadline_s:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(request, timeout=1.0) as response,
            ):
                if response.status == 200:
                    self.ready_after_s = time.perf_counter() - self.started_s
                    return
            time.sleep(POLL_INTERVAL_S)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def rss_bytes(self) -> int:
        """Resident memory of the process and all its descendants."""
        return sum(_rss_bytes(pid) for pid in _process_tree(self.pid))

    def cpu_s(self) -> float:
        """CPU time (user + system) the process and its descendants have used so far."""
        return sum(_cpu_s(pid) for pid in _process_tree(self.pid))

    def log_tail(self, num_lines: int = 15) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-num_lines:])

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after a grace period. Safe to call twice."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # Stragglers that left the group would otherwise outlive the benchmark.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _process_tree(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is parenthesised and may hold spaces; fields follow the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop()
        tree.append(pid)
        frontier.extend(children.get(pid, []))
    return tree


def _rss_bytes(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_s(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    # utime and stime are fields 14 and 15 of proc(5), counted from the state (field 3).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

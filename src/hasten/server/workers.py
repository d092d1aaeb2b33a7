"""``hasten serve --workers N``: N gateway processes on one listening socket.

The parent binds the socket once and spawns N workers (spawned, not forked, so none
inherits the parent's event loop or threads); each runs the whole gateway on that socket
and the kernel hands every new connection to whichever worker accepts it first. The workers
share what lives outside a process (the SQLite or Redis tier, the local engine child, the
demo simulator) and keep their own L1, routing estimates, hedge budget and counters.

One fact must cross processes at once: an exact-cache delete (an admin invalidation), or
another worker's L1 would go on serving the deleted answer. Each worker holds one end of a
socket pair whose other end the parent holds (``PeerLink``); the parent relays every delete
a worker announces to all the others. The semantic tier keeps its index in the process, so
with several workers it must be the shared Redis tier, which already keeps replicas in step.

A worker that dies is restarted after ``RESTART_DELAY_S`` (at most
``MAX_RESTARTS_PER_MINUTE`` times a minute, then it stays down, logged); the others serve on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from hasten.app import HastenApp
from hasten.cache import TieredCache
from hasten.config import GatewayConfig
from hasten.errors import ConfigError
from hasten.local.supervisor import describe_exit
from hasten.server import logs
from hasten.server.connection import uvicorn_server

_log = logging.getLogger("hasten.workers")

RESTART_DELAY_S = 1.0
MAX_RESTARTS_PER_MINUTE = 10
STOP_TIMEOUT_S = 10.0  # a worker's graceful shutdown (uvicorn gives requests 5 s)
# A cache key is a short hash (cache/request_key.py): anything longer is not a message of ours.
MAX_MESSAGE_BYTES = 4096
_DELETE = b"d"


def check_workers(config: GatewayConfig) -> None:
    """Refuses a worker count the rest of the config cannot serve correctly."""
    if config.server.num_workers <= 1:
        return
    if config.metrics.is_enabled and config.metrics.port is not None:
        raise ConfigError(
            f"workers = {config.server.num_workers} with [metrics] port: one port cannot "
            "serve every worker's counters; scrape /metrics on the gateway port instead "
            "(each scrape describes the worker that answered it)"
        )
    if config.keys.is_enabled and config.keys.store == "memory":
        raise ConfigError(
            f"workers = {config.server.num_workers} with [keys] in memory: each worker would "
            "know only the virtual keys created through it; set [keys] sqlite_path"
        )
    semantic = config.semantic
    if semantic.is_enabled and config.cache.backend != "redis":
        raise ConfigError(
            f"workers = {config.server.num_workers} with [semantic] needs the Redis cache "
            "tier (--redis-url): each worker would keep its own semantic index, and an "
            "entry invalidated in one would still be served by the others"
        )


class PeerLink:
    """A worker's end of the parent's relay: deletes made here go out, others' come in."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self.on_parent_gone: Callable[[], None] | None = None
        self._cache: TieredCache | None = None
        self._is_reading = False
        self.num_received = 0
        self.num_dropped = 0

    def attach(self, cache: TieredCache) -> None:
        """Announces the cache's deletes, and applies the other workers' to its L1."""
        self._cache = cache
        cache.on_delete = self._announce
        asyncio.get_running_loop().add_reader(self._sock.fileno(), self._receive)
        self._is_reading = True

    def close(self) -> None:
        if self._is_reading:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._is_reading = False
        if self._cache is not None:
            self._cache.on_delete = None
        self._sock.close()

    def _announce(self, key: str) -> None:
        try:
            self._sock.send(_DELETE + key.encode())
        except OSError as exc:
            # A full buffer means the parent stopped reading; a closed one, that it is gone.
            self.num_dropped += 1
            _log.error("could not tell the other workers that %r was deleted: %s", key, exc)

    def _receive(self) -> None:
        while True:
            try:
                message = self._sock.recv(MAX_MESSAGE_BYTES)
            except BlockingIOError:
                return
            except OSError:
                message = b""
            if not message:
                _log.error("the parent process is gone: this worker stops")
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
                self._is_reading = False
                if self.on_parent_gone is not None:
                    self.on_parent_gone()
                return
            if message[:1] == _DELETE and self._cache is not None:
                self._cache.forget(message[1:].decode())
                self.num_received += 1


class _Worker:
    __slots__ = ("index", "link", "process", "restarts_s")

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: BaseProcess | None = None
        self.link: socket.socket | None = None  # the parent's end of the worker's pair
        self.restarts_s: deque[float] = deque()


class WorkerPool:
    """Starts, relays for, restarts and stops the gateway's worker processes."""

    def __init__(self, config: GatewayConfig, sock: socket.socket) -> None:
        self._config = config
        self._sock = sock
        self._context = multiprocessing.get_context("spawn")
        self._workers = [_Worker(i) for i in range(config.server.num_workers)]
        self._stopping = asyncio.Event()
        self._exited: asyncio.Queue[_Worker] = asyncio.Queue()

    def stop(self) -> None:
        self._stopping.set()

    @property
    def pids(self) -> list[int | None]:
        return [None if w.process is None else w.process.pid for w in self._workers]

    async def run(self) -> None:
        """Runs until ``stop``; then stops every worker (SIGTERM, then SIGKILL)."""
        for worker in self._workers:
            self._start(worker)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                exited = asyncio.ensure_future(self._exited.get())
                await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
                if exited.done():
                    self._on_exit(exited.result())
                else:
                    exited.cancel()
        finally:
            stopping.cancel()
            await self._stop_all()

    def _start(self, worker: _Worker) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        process = self._context.Process(
            target=worker_main,
            args=(self._config, self._sock, child_end, worker.index),
            name=f"hasten-worker-{worker.index}",
            daemon=False,
        )
        process.start()
        child_end.close()
        parent_end.setblocking(False)
        worker.process, worker.link = process, parent_end
        loop = asyncio.get_running_loop()
        loop.add_reader(parent_end.fileno(), self._relay, worker)
        loop.add_reader(process.sentinel, self._sentinel, worker)
        _log.info("worker %d started (pid %s)", worker.index, process.pid)

    def _sentinel(self, worker: _Worker) -> None:
        assert worker.process is not None
        asyncio.get_running_loop().remove_reader(worker.process.sentinel)
        self._exited.put_nowait(worker)

    def _relay(self, source: _Worker) -> None:
        assert source.link is not None
        while True:
            try:
                message = source.link.recv(MAX_MESSAGE_BYTES)
            except BlockingIOError:
                return
            except OSError:
                message = b""
            if not message:
                asyncio.get_running_loop().remove_reader(source.link.fileno())
                return
            for worker in self._workers:
                if worker is not source and worker.link is not None:
                    try:
                        worker.link.send(message)
                    except OSError as exc:
                        _log.error("could not relay a delete to worker %d: %s", worker.index, exc)

    def _on_exit(self, worker: _Worker) -> None:
        assert worker.process is not None and worker.link is not None
        worker.process.join(1.0)
        code = worker.process.exitcode
        how = "?" if code is None else describe_exit(code)
        self._drop_link(worker)
        now_s = time.monotonic()
        while worker.restarts_s and now_s - worker.restarts_s[0] > 60.0:
            worker.restarts_s.popleft()
        if len(worker.restarts_s) >= MAX_RESTARTS_PER_MINUTE:
            _log.error(
                "worker %d exited (%s) %d times within a minute: not restarted",
                worker.index,
                how,
                MAX_RESTARTS_PER_MINUTE,
            )
            if all(w.process is None for w in self._workers):
                self.stop()
            return
        worker.restarts_s.append(now_s)
        _log.error("worker %d exited (%s): restarting it", worker.index, how)
        asyncio.get_running_loop().call_later(RESTART_DELAY_S, self._restart, worker)

    def _restart(self, worker: _Worker) -> None:
        if not self._stopping.is_set():
            self._start(worker)

    def _drop_link(self, worker: _Worker) -> None:
        if worker.link is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(worker.link.fileno())
            worker.link.close()
        worker.link, worker.process = None, None

    async def _stop_all(self) -> None:
        running = [w for w in self._workers if w.process is not None and w.process.is_alive()]
        for worker in running:
            assert worker.process is not None
            worker.process.terminate()
        deadline_s = time.monotonic() + STOP_TIMEOUT_S
        for worker in running:
            assert worker.process is not None
            while worker.process.is_alive() and time.monotonic() < deadline_s:
                await asyncio.sleep(0.05)
            if worker.process.is_alive():
                _log.error("worker %d did not stop in time: killed", worker.index)
                worker.process.kill()
                worker.process.join(1.0)
        for worker in self._workers:
            if worker.process is not None:
                with contextlib.suppress(ValueError, OSError):
                    asyncio.get_running_loop().remove_reader(worker.process.sentinel)
            self._drop_link(worker)


def install_stop_signals(stop: Callable[[], None]) -> None:
    """SIGINT and SIGTERM stop the pool (after any uvicorn server in this process started:
    uvicorn installs its own handlers when it starts)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)


def worker_main(
    config: GatewayConfig, sock: socket.socket, link_sock: socket.socket, index: int
) -> None:
    """A worker process: the whole gateway on the shared socket, until told to stop."""
    logs.configure(config.server.log_level, config.server.log_format)
    runner: Any
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve_worker(config, sock, link_sock, index))


async def _serve_worker(
    config: GatewayConfig, sock: socket.socket, link_sock: socket.socket, index: int
) -> None:
    link = PeerLink(link_sock)
    app = HastenApp(config, peers=link, worker_index=index, is_heap_frozen=True)
    server = config.server
    uvicorn = uvicorn_server(app, server.log_level, server, server.log_format)

    def parent_gone() -> None:
        uvicorn.should_exit = True  # an orphan must not keep holding the port

    link.on_parent_gone = parent_gone
    await uvicorn.serve(sockets=[sock])

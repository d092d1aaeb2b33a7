"""Request coalescing: one upstream answer, shared by every client that asked for it.

A ``Flight`` records the upstream's status, headers and body chunks as they arrive. Each
waiter reads from the start of the recording, so a late joiner first gets what was
already sent and then follows live. The upstream call is cancelled only when the last
waiter leaves. A waiter that did not ask for usage reads the recording without its
usage-only events (``iter_chunks_without_usage``).

A bypass (a request nothing is shared with) is a flight with one waiter: ``DirectFlight``
reads its own upstream call through the same interface, so one path serves every client
(``hasten.proxy.handle._serve_flight``), without recording what only one client reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from hasten.errors import HastenError
from hasten.proxy.assemble import Assembly
from hasten.proxy.spans import keep_tail
from hasten.upstream.client import UpstreamCall
from hasten.values.usage import UsageStripper, without_usage

_log = logging.getLogger("hasten.flight")


class Flight:
    """One upstream response being received, readable by many waiters."""

    __slots__ = (
        "_changed",
        "_started_s",
        "assembly",
        "chunks",
        "error",
        "headers",
        "is_done",
        "is_relayed",
        "is_started",
        "num_waiters",
        "status",
        "task",
        "ttfb_ms",
        "upstream_ms",
        "upstream_name",
        "usage_at",
    )

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.status = 0
        self.headers: Mapping[str, str] = {}
        self.upstream_name = ""
        self.ttfb_ms = 0.0
        # Until the upstream's last byte: what an assembled body waited on upstream.
        self.upstream_ms = 0.0
        self._started_s = 0.0
        self.error: HastenError | None = None
        self.is_started = False
        self.is_done = False
        self.is_relayed = False  # filled from another replica's call (hasten.fleet)
        self.num_waiters = 0
        self.task: asyncio.Task[None] | None = None
        # Chunk index -> how many usage-only events that chunk completes (one, at the end).
        self.usage_at: dict[int, int] = {}
        self._changed = asyncio.Event()
        # The leader's answer assembled as it arrives, for non-stream waiters (None: each
        # assembles the recorded bytes, hasten.proxy.assemble).
        self.assembly: Assembly | None = None

    def _notify(self) -> None:
        # A fresh Event per change lets every waiter wake once without clear() races.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def start(
        self, status: int, headers: Mapping[str, str], upstream_name: str, ttfb_ms: float
    ) -> None:
        self.status, self.headers = status, headers
        self.upstream_name, self.ttfb_ms = upstream_name, ttfb_ms
        self.upstream_ms, self._started_s = ttfb_ms, time.perf_counter()
        self.is_started = True
        self._notify()

    def push(self, chunk: bytes, num_usage_events: int = 0) -> None:
        if num_usage_events:
            # Marked before the chunk is readable, so no waiter can pass it unmarked.
            self.usage_at[len(self.chunks)] = num_usage_events
        self.chunks.append(chunk)
        self._notify()

    def finish(self, error: HastenError | None = None) -> None:
        # Kept past the call that raised it: without the frames (and what they read).
        self.error = None if error is None else error.detached()
        if self.is_started:
            self.upstream_ms = self.ttfb_ms + (time.perf_counter() - self._started_s) * 1000.0
        self.is_done = True
        self._notify()

    async def wait_change(self) -> None:
        """Returns after the next start, push or finish: for a reader that is no waiter."""
        await self._changed.wait()

    async def wait_started(self) -> None:
        """Returns once the status is known, or raises the error that prevented it."""
        while not self.is_started:
            if self.is_done:
                raise self.error or HastenError("upstream call ended without a response")
            await self._changed.wait()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """All chunks from the first, then live ones; ends when the upstream does."""
        index = 0
        while True:
            changed = self._changed
            while index < len(self.chunks):
                yield self.chunks[index]
                index += 1
            if self.is_done:
                return
            await changed.wait()

    async def iter_chunks_without_usage(self) -> AsyncIterator[bytes]:
        """``iter_chunks`` minus usage-only events, for a client that did not ask for usage.

        Its own loop rather than a wrapper: one generator per chunk, not two.
        """
        stripper = UsageStripper()
        index = 0
        while True:
            changed = self._changed
            while index < len(self.chunks):
                data = stripper.feed(self.chunks[index], self.usage_at.get(index, 0))
                index += 1
                if data:
                    yield data
            if self.is_done:
                break
            await changed.wait()
        rest = stripper.finish()
        if rest:
            yield rest

    async def wait_done(self) -> None:
        """Returns once the flight has ended (``error`` says how)."""
        while not self.is_done:
            await self._changed.wait()

    async def read_all(self) -> bytes:
        await self.wait_done()
        return b"".join(self.chunks)


class DirectFlight:
    """One upstream call read by its one waiter, through ``Flight``'s reader interface.

    Nothing is recorded: a stream's chunks pass through as they come, ``chunks`` keeping
    only its last few (where its usage and ending are) when the trace or the usage is read;
    a whole answer (a non-stream client's, an error status) is read into ``chunks`` by
    ``wait_done``, as a flight's is before its waiters are served. An error is raised to
    the one waiter where it happens, never kept (``error`` stays None).
    """

    __slots__ = (
        "_call",
        "_chunks",
        "_is_assembled",
        "_is_tail_kept",
        "_started_s",
        "assembly",
        "chunks",
        "headers",
        "status",
        "ttfb_ms",
        "upstream_ms",
        "upstream_name",
    )
    error: HastenError | None = None
    is_relayed = False

    def __init__(
        self,
        call: UpstreamCall,
        chunks: AsyncIterator[bytes],
        assembly: Assembly | None,
        *,
        is_assembled: bool,
        is_tail_kept: bool,
    ) -> None:
        """``chunks``: the call's body as a stream (the assembly fed from its checked
        events, or a continued stream's); ``is_assembled``: a 200 assembled into one body."""
        self._call, self._chunks, self.assembly = call, chunks, assembly
        self._is_assembled, self._is_tail_kept = is_assembled, is_tail_kept
        self.status, self.headers = call.status, call.headers
        self.upstream_name, self.ttfb_ms = call.upstream.name, call.ttfb_ms
        self.upstream_ms, self._started_s = call.ttfb_ms, time.perf_counter()
        self.chunks: list[bytes] = []

    async def wait_started(self) -> None:
        """The call is open: its status is known."""

    async def wait_done(self) -> None:
        """Reads the whole answer: its chunks when it is assembled, else its body."""
        if self._is_assembled:
            self.chunks = [chunk async for chunk in self._chunks]
            self.upstream_ms = self.ttfb_ms + (time.perf_counter() - self._started_s) * 1000.0
        else:
            self.chunks = [await self._call.read()]

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return keep_tail(self._chunks, self.chunks) if self._is_tail_kept else self._chunks

    def iter_chunks_without_usage(self) -> AsyncIterator[bytes]:
        return without_usage(self._chunks, self.chunks)


class Coalescer:
    """Shares identical in-flight requests; a key names one flight while it runs."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def is_flying(self, key: str) -> bool:
        """Whether a request with ``key`` would join a flight now rather than start one."""
        flight = self._flights.get(key)
        return flight is not None and flight.num_waiters > 0

    def join(self, key: str, run: Callable[[Flight], Awaitable[None]]) -> tuple[Flight, bool]:
        """Returns the flight for ``key`` (starting ``run`` if new) and whether it was new."""
        flight = self._flights.get(key)
        # A flight nobody waits for is being cancelled: a newcomer must not inherit that.
        is_new = flight is None or flight.num_waiters <= 0
        if flight is None or is_new:
            flight = Flight()
            self._flights[key] = flight
            flight.task = asyncio.get_running_loop().create_task(self._run(key, flight, run))
        flight.num_waiters += 1
        return flight, is_new

    def leave(self, flight: Flight) -> None:
        flight.num_waiters -= 1
        if flight.num_waiters <= 0 and not flight.is_done and flight.task is not None:
            flight.task.cancel()

    async def _run(
        self, key: str, flight: Flight, run: Callable[[Flight], Awaitable[None]]
    ) -> None:
        try:
            await run(flight)
        except asyncio.CancelledError:
            if not flight.is_done:
                flight.finish(HastenError("request cancelled", code="cancelled"))
            raise
        except Exception:
            # A bug must not leave waiters hanging: they get a 500, the log gets the trace.
            _log.exception("coalesced upstream call failed")
            if not flight.is_done:
                flight.finish(HastenError("internal error while calling upstream"))
        finally:
            if not flight.is_done:
                flight.finish()
            # Later identical requests should find the cache, not this finished flight.
            if self._flights.get(key) is flight:
                del self._flights[key]

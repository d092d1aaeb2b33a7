"""One replica of the shared tier: keeps its local copy in step with Redis.

``SemanticCache`` owns a ``SharedReplica`` when ``redis_url`` is set. The replica owns the
Redis side (``RedisTier``), the following task and the two things following keeps in the
store's file: its stream position and the invalidations waiting for Redis. Rows and the
index stay the store's: the replica reaches them only through ``ReplicaStore``.

Following, a background task: resume from the saved stream position (or rebuild from the
entry hashes when there is none or it was trimmed off the stream), then apply events as a
short blocking XREAD returns them. Any failure means "Redis is away": wait, then resume
again. Invalidations made here while Redis was away are published first, before any
rebuild could bring their entries back. See ``redis_tier`` for the data layout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import orjson

from hasten.semantic.redis_tier import (
    FAILURES,
    DeleteEvent,
    Event,
    RedisTier,
    SharedEntry,
    is_before,
)

_LOG = logging.getLogger("hasten.semantic")
CURSOR_META = "shared_stream_id"
PENDING_META = "pending_deletes"
# Invalidations waiting for Redis; beyond this the oldest are dropped (and counted): a
# replica cut off that long is rebuilt from Redis when it returns anyway.
MAX_PENDING_DELETES = 10_000
_STOP_WAIT_S = 2.0
_REBUILD_BATCH = 500
_T = TypeVar("_T")


class ReplicaStore(Protocol):
    """What a replica needs of the store that holds its local copy."""

    async def read_meta(self, key: str, parse: Callable[[bytes | None], _T]) -> _T:
        """``parse(value)``, run on the store's worker (so in step with ``update_meta``)."""

    async def update_meta(self, key: str, change: Callable[[bytes | None], bytes]) -> None:
        """Replaces a value with ``change(value)``, in one step on the store's worker."""

    async def apply_shared(self, events: Sequence[Event]) -> None:
        """Other replicas' inserts and invalidations, idempotently."""

    async def keep_only_shared(self, shared_ids: set[int]) -> None:
        """Drops shared entries (ids below ``LOCAL_ID_BASE``) not in ``shared_ids``."""


def needs_rebuild(saved: bytes | None, first: bytes | None, last: bytes) -> bool:
    """Whether events after ``saved`` may be missing from the stream (pure)."""
    if saved is None:
        return True
    if first is not None and is_before(saved, first):
        return True  # trimmed past our position
    return is_before(last, saved)  # a position from another (or a flushed) Redis


class SharedReplica:
    """The shared-tier side of one ``SemanticCache``: the store is ``local``.

    ``counters`` is the store's (``shared_*`` keys); the ``num_*`` totals are the follower's.
    """

    def __init__(
        self,
        shared: RedisTier,
        local: ReplicaStore,
        counters: Counter[str],
        *,
        clock: Callable[[], float],
    ) -> None:
        self.shared = shared
        self._local = local
        self._counters = counters
        self._clock = clock
        self._follow_task: asyncio.Task[None] | None = None
        self._is_stopping = False
        self.has_pending_deletes = True  # until the local file has been read
        self.is_connected = False
        self.num_applied = 0
        self.num_rebuilds = 0
        self.num_failures = 0
        self.num_replayed_deletes = 0

    @property
    def is_following(self) -> bool:
        return self._follow_task is not None

    def stats(self) -> dict[str, Any]:
        """The follower's state (empty until it started)."""
        if not self.is_following:
            return {}
        return {
            "is_connected": self.is_connected,
            "applied_events": self.num_applied,
            "rebuilds": self.num_rebuilds,
            "failures": self.num_failures,
        }

    def start(self) -> None:
        """Starts following the shared tier (idempotent; outside an event loop it waits for
        the first lookup or insert)."""
        if self._follow_task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._follow_task = loop.create_task(self._follow())

    async def close(self) -> None:
        """Stops following and closes the Redis clients. Cancelling alone is not enough: a
        cancelled blocking read may surface inside the Redis client as a connection error
        (or not at all), so following also ends at its next step."""
        if self._follow_task is not None:
            self._is_stopping = True
            self._follow_task.cancel()
            # Bounded: one blocking read at most; a stuck read must not hold up shutdown.
            await asyncio.wait({self._follow_task}, timeout=_STOP_WAIT_S)
        await self.shared.aclose()

    async def publish_insert(self, entry: SharedEntry) -> None:
        is_published = await self.shared.publish_insert(entry)
        self._counters["shared_published" if is_published else "shared_publish_dropped"] += 1

    async def share_delete(self, event: DeleteEvent, entry_ids: list[int]) -> None:
        """Publishes a local invalidation; while Redis is away it waits in the local file
        and the follower publishes it before anything else once Redis is back (otherwise
        the other replicas would keep serving what was invalidated, and a rebuild from
        Redis would bring it back here)."""
        if await self.shared.publish_delete(event, entry_ids):
            self._counters["shared_published"] += 1
            return
        # Replayed later, the filter must not reach entries created after this moment.
        now = self._clock()
        created_before = now if event.created_before is None else min(event.created_before, now)
        queued = {"where": event.where, "created_before": created_before, "ids": entry_ids}

        def enqueue(saved: bytes | None) -> bytes:
            pending = orjson.loads(saved or b"[]")
            pending.append(queued)
            if len(pending) > MAX_PENDING_DELETES:
                self._counters["shared_pending_dropped"] += len(pending) - MAX_PENDING_DELETES
                del pending[:-MAX_PENDING_DELETES]
            self.has_pending_deletes = True
            return orjson.dumps(pending)

        await self._local.update_meta(PENDING_META, enqueue)
        self._counters["shared_publish_queued"] += 1

    async def pending_deletes(self) -> list[tuple[DeleteEvent, list[int]]]:
        """Invalidations made while Redis was away, oldest first."""

        def parse(saved: bytes | None) -> list[tuple[DeleteEvent, list[int]]]:
            pending = orjson.loads(saved or b"[]")
            self.has_pending_deletes = bool(pending)
            return [(DeleteEvent(p["where"], p["created_before"]), p["ids"]) for p in pending]

        return await self._local.read_meta(PENDING_META, parse)

    async def drop_pending_deletes(self, num_published: int) -> None:
        """The oldest ``num_published`` pending invalidations are in Redis now."""

        def drop(saved: bytes | None) -> bytes:
            # Re-read: invalidations queued while these were published stay, at the end.
            pending = orjson.loads(saved or b"[]")[num_published:]
            self.has_pending_deletes = bool(pending)
            return orjson.dumps(pending)

        await self._local.update_meta(PENDING_META, drop)

    # --- following ---

    async def _follow(self) -> None:
        cursor: bytes | None = None
        while not self._is_stopping:
            try:
                if self.has_pending_deletes:
                    await self._publish_pending()
                if cursor is None:
                    cursor = await self._resume()
                    self.is_connected = True
                events = await self.shared.read(cursor)
                if events:
                    await self._local.apply_shared([event for _, event in events])
                    cursor = events[-1][0]
                    await self._save_cursor(cursor)
                    self.num_applied += len(events)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away or a bad event: never stop following
                if self._is_stopping:
                    return
                self._on_failure(exc)
                cursor = None
                await asyncio.sleep(self.shared.retry_backoff_s)

    def _on_failure(self, exc: Exception) -> None:
        self.num_failures += 1
        if self.is_connected or self.num_failures == 1:
            is_expected = isinstance(exc, FAILURES)
            _LOG.warning(
                "semantic shared tier: following stopped (%s); retrying",
                exc,
                exc_info=not is_expected,
            )
        self.is_connected = False

    async def _publish_pending(self) -> None:
        num_published = 0
        try:
            for event, entry_ids in await self.pending_deletes():
                if not await self.shared.publish_delete(event, entry_ids):
                    raise ConnectionError("pending invalidations not published yet")
                num_published += 1
        finally:  # one write for the whole batch, even when it stopped part-way
            if num_published:
                await self.drop_pending_deletes(num_published)
                self.num_replayed_deletes += num_published

    async def _resume(self) -> bytes:
        saved = await self._local.read_meta(CURSOR_META, lambda saved: saved)
        first, last = await self.shared.stream_bounds()
        if not needs_rebuild(saved, first, last) and saved is not None:
            return saved
        # Take the position first: events racing the scan are applied again (idempotent).
        ids = await self.shared.scan_ids()
        for start in range(0, len(ids), _REBUILD_BATCH):
            batch = await self.shared.load(ids[start : start + _REBUILD_BATCH])
            await self._local.apply_shared(batch)
        await self._local.keep_only_shared(set(ids))
        await self._save_cursor(last)
        self.num_rebuilds += 1
        return last

    async def _save_cursor(self, cursor: bytes) -> None:
        await self._local.update_meta(CURSOR_META, lambda _saved: cursor)

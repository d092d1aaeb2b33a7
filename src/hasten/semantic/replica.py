"""One replica of the shared tier: its ``Follower``, and what the follower keeps in the file.

``SemanticCache`` owns a ``SharedReplica`` when ``redis_url`` is set. The replica owns the
Redis side (``RedisTier``), the follower task and the two things the follower keeps in
the store's file: its stream position and the invalidations waiting for Redis. Rows and
the index stay the store's: the replica reaches them only through ``ReplicaStore``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import orjson

from hasten.semantic.follower import Follower
from hasten.semantic.redis_tier import DeleteEvent, Event, RedisTier, SharedEntry

CURSOR_META = "shared_stream_id"
PENDING_META = "pending_deletes"
# Invalidations waiting for Redis; beyond this the oldest are dropped (and counted): a
# replica cut off that long is rebuilt from Redis when it returns anyway.
MAX_PENDING_DELETES = 10_000
_STOP_WAIT_S = 2.0
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


class SharedReplica:
    """The shared-tier side of one ``SemanticCache``: the store is ``local``.

    It is the follower's ``LocalCopy``. ``counters`` is the store's (``shared_*`` keys).
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
        self._follower: Follower | None = None
        self._follow_task: asyncio.Task[None] | None = None
        self.has_pending_deletes = True  # until the local file has been read

    @property
    def follower(self) -> Follower | None:
        """The task keeping this replica in step with the shared tier, once started."""
        return self._follower

    def follower_stats(self) -> dict[str, Any]:
        follower = self._follower
        if follower is None:
            return {}
        return {
            "is_connected": follower.is_connected,
            "applied_events": follower.num_applied,
            "rebuilds": follower.num_rebuilds,
            "failures": follower.num_failures,
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
        self._follower = Follower(self.shared, self)
        self._follow_task = loop.create_task(self._follower.run())

    async def close(self) -> None:
        """Stops following and closes the Redis clients."""
        if self._follow_task is not None and self._follower is not None:
            self._follower.stop()
            self._follow_task.cancel()
            # Bounded: one blocking read at most; a stuck read must not hold up shutdown.
            await asyncio.wait({self._follow_task}, timeout=_STOP_WAIT_S)
        await self.shared.aclose()

    async def next_id(self) -> int | None:
        """A cluster-wide id for a new entry, or None while Redis is away."""
        return await self.shared.next_id()

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

    # --- the follower's view of this replica (``follower.LocalCopy``) ---

    async def pending_deletes(self) -> list[tuple[DeleteEvent, list[int]]]:
        def parse(saved: bytes | None) -> list[tuple[DeleteEvent, list[int]]]:
            pending = orjson.loads(saved or b"[]")
            self.has_pending_deletes = bool(pending)
            return [(DeleteEvent(p["where"], p["created_before"]), p["ids"]) for p in pending]

        return await self._local.read_meta(PENDING_META, parse)

    async def drop_pending_deletes(self, num_published: int) -> None:
        def drop(saved: bytes | None) -> bytes:
            # Re-read: invalidations queued while these were published stay, at the end.
            pending = orjson.loads(saved or b"[]")[num_published:]
            self.has_pending_deletes = bool(pending)
            return orjson.dumps(pending)

        await self._local.update_meta(PENDING_META, drop)

    async def load_cursor(self) -> bytes | None:
        return await self._local.read_meta(CURSOR_META, lambda saved: saved)

    async def save_cursor(self, cursor: bytes) -> None:
        await self._local.update_meta(CURSOR_META, lambda _saved: cursor)

    async def apply(self, events: Sequence[Event]) -> None:
        await self._local.apply_shared(events)

    async def keep_only(self, shared_ids: set[int]) -> None:
        await self._local.keep_only_shared(shared_ids)

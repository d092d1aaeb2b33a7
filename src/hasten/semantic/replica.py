"""A semantic cache as one replica of the shared tier: the follower's view of its store.

Mixed into ``SemanticCache`` (kept apart so the store stays readable): starting the
``Follower`` and applying other replicas' events to the local SQLite rows and index. The
store provides the worker-thread primitives declared below.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import orjson

from hasten.semantic.follower import Follower
from hasten.semantic.index import VectorIndex
from hasten.semantic.records import Records
from hasten.semantic.shared import LOCAL_ID_BASE, DeleteEvent, Event, SharedTier

_R = TypeVar("_R")
_CURSOR_META = "shared_stream_id"
_PENDING_META = "pending_deletes"
# Invalidations waiting for Redis; beyond this the oldest are dropped (and counted): a
# replica cut off that long is rebuilt from Redis when it returns anyway.
MAX_PENDING_DELETES = 10_000


class SharedReplica:
    """Shared-tier behaviour of ``SemanticCache``; inert when ``shared`` is None."""

    shared: SharedTier | None
    counters: Counter[str]
    _follower: Follower | None
    _follow_task: asyncio.Task[None] | None
    _index: VectorIndex
    _loaded: set[str]
    _clock: Callable[[], float]

    async def _run(self, operation: Callable[..., _R], *args: Any) -> _R:
        raise NotImplementedError

    def _open(self) -> Records:
        raise NotImplementedError

    def _remove(self, records: Records, rows: list[tuple[int, str]], reason: str) -> None:
        raise NotImplementedError

    def _delete_sync(
        self, event: DeleteEvent, reason: str = "invalidated"
    ) -> list[tuple[int, str]]:
        raise NotImplementedError

    def _note_insert(self, records: Records, text: str, now: float) -> None:
        raise NotImplementedError

    @property
    def follower(self) -> Follower | None:
        """The task keeping this replica in step with the shared tier, once started."""
        return self._follower

    def follower_stats(self) -> dict[str, Any]:
        follower = self._follower
        if follower is None:
            return {}
        return {
            "is_connected": follower.is_connected, "applied_events": follower.num_applied,
            "rebuilds": follower.num_rebuilds, "failures": follower.num_failures,
        }  # fmt: skip

    def start(self) -> None:
        """Starts following the shared tier (idempotent; outside an event loop it waits for
        the first lookup or insert)."""
        if self.shared is None or self._follow_task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._follower = Follower(self.shared, self)
        self._follow_task = loop.create_task(self._follower.run())

    async def share_delete(self, event: DeleteEvent, entry_ids: list[int]) -> None:
        """Publishes a local invalidation; while Redis is away it waits in the local file
        and the follower publishes it before anything else once Redis is back (otherwise
        the other replicas would keep serving what was invalidated, and a rebuild from
        Redis would bring it back here)."""
        assert self.shared is not None
        if await self.shared.publish_delete(event, entry_ids):
            self.counters["shared_published"] += 1
            return
        # Replayed later, the filter must not reach entries created after this moment.
        now = self._clock()
        created_before = now if event.created_before is None else min(event.created_before, now)
        await self._run(
            self._queue_delete_sync, DeleteEvent(event.where, created_before), entry_ids
        )
        self.counters["shared_publish_queued"] += 1

    def _queue_delete_sync(self, event: DeleteEvent, entry_ids: list[int]) -> None:
        records = self._open()
        pending = orjson.loads(records.get_meta(_PENDING_META) or b"[]")
        pending.append({"where": event.where, "created_before": event.created_before,
                        "ids": entry_ids})  # fmt: skip
        if len(pending) > MAX_PENDING_DELETES:
            self.counters["shared_pending_dropped"] += len(pending) - MAX_PENDING_DELETES
            del pending[:-MAX_PENDING_DELETES]
        records.set_meta(_PENDING_META, orjson.dumps(pending))
        self.has_pending_deletes = True

    # --- the follower's view of this replica (``follower.LocalCopy``) ---

    has_pending_deletes = True  # until the local file has been read

    async def pending_deletes(self) -> list[tuple[DeleteEvent, list[int]]]:
        def read() -> list[tuple[DeleteEvent, list[int]]]:
            pending = orjson.loads(self._open().get_meta(_PENDING_META) or b"[]")
            self.has_pending_deletes = bool(pending)
            return [(DeleteEvent(p["where"], p["created_before"]), p["ids"]) for p in pending]

        return await self._run(read)

    async def drop_pending_deletes(self, num_published: int) -> None:
        def drop() -> None:
            records = self._open()
            # Re-read: invalidations queued while these were published stay, at the end.
            pending = orjson.loads(records.get_meta(_PENDING_META) or b"[]")[num_published:]
            records.set_meta(_PENDING_META, orjson.dumps(pending))
            self.has_pending_deletes = bool(pending)

        await self._run(drop)

    async def load_cursor(self) -> bytes | None:
        return await self._run(lambda: self._open().get_meta(_CURSOR_META))

    async def save_cursor(self, cursor: bytes) -> None:
        await self._run(lambda: self._open().set_meta(_CURSOR_META, cursor))

    async def apply(self, events: Sequence[Event]) -> None:
        await self._run(self._apply_sync, events)

    async def keep_only(self, shared_ids: set[int]) -> None:
        def drop() -> None:
            records = self._open()
            rows = records.select_ids_below(LOCAL_ID_BASE)
            self._remove(records, [row for row in rows if row[0] not in shared_ids], "dropped")

        await self._run(drop)

    def _apply_sync(self, events: Sequence[Event]) -> None:
        """Another replica's inserts and invalidations, idempotently."""
        records = self._open()
        now = self._clock()
        for event in events:
            if isinstance(event, DeleteEvent):
                self._delete_sync(event, reason="invalidated_shared")
            elif event is not None and event.expires_at > now and not records.has(event.entry_id):
                vector = np.frombuffer(event.vector_f16, dtype=np.float16).astype(np.float32)
                records.insert(
                    partition=event.partition, tenant=event.tenant, model=event.model,
                    text=event.text, vector=vector, answer_key=event.answer_key,
                    now=event.created_at, ttl_s=event.expires_at - event.created_at,
                    entry_id=event.entry_id, answer_class=event.answer_class,
                )  # fmt: skip
                if event.partition in self._loaded:  # else loaded from the file on first use
                    self._index.add(event.partition, event.entry_id, vector)
                self._note_insert(records, event.text, now)
                self.counters["shared_applied"] += 1

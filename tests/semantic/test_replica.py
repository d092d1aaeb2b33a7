"""The shared replica on its own: what it keeps in the store's file while Redis is away."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

import pytest

from hasten.semantic.records import Row
from hasten.semantic.redis_tier import DeleteEvent, Event, RedisTier, SharedEntry
from hasten.semantic.replica import CURSOR_META, PENDING_META, SharedReplica
from tests.support.semantic import eventually
from tests.support.servers import free_port

_T = TypeVar("_T")
NOW = 1_000.0


class MemoryStore:
    """A ``ReplicaStore`` keeping the file's metadata in a dict."""

    def __init__(self) -> None:
        self.meta: dict[str, bytes] = {}
        self.applied: list[Event] = []
        self.kept: list[set[int]] = []

    async def read_meta(self, key: str, parse: Callable[[bytes | None], _T]) -> _T:
        return parse(self.meta.get(key))

    async def update_meta(self, key: str, change: Callable[[bytes | None], bytes]) -> None:
        self.meta[key] = change(self.meta.get(key))

    async def apply_shared(self, events: Sequence[Event]) -> None:
        self.applied.extend(events)

    async def keep_only_shared(self, shared_ids: set[int]) -> None:
        self.kept.append(shared_ids)


@pytest.fixture
async def away() -> AsyncIterator[tuple[SharedReplica, MemoryStore, Counter[str]]]:
    """A replica whose Redis is not there (nothing listens on the port)."""
    shared = RedisTier(f"redis://127.0.0.1:{free_port()}/0", namespace="test:")
    store, counters = MemoryStore(), Counter[str]()
    replica = SharedReplica(shared, store, counters, clock=lambda: NOW)
    yield replica, store, counters
    await replica.close()


async def test_invalidations_wait_in_the_file_while_redis_is_away(
    away: tuple[SharedReplica, MemoryStore, Counter[str]],
) -> None:
    replica, store, counters = away
    await replica.share_delete(DeleteEvent({"tenant": "t"}, None), [1, 2])
    await replica.share_delete(DeleteEvent({"entry_id": 3}, NOW - 5), [3])
    assert counters["shared_publish_queued"] == 2 and not counters["shared_published"]
    assert PENDING_META in store.meta and replica.has_pending_deletes
    pending = await replica.pending_deletes()
    # Replayed later, a filter must not reach entries created after the invalidation.
    assert pending == [
        (DeleteEvent({"tenant": "t"}, NOW), [1, 2]),
        (DeleteEvent({"entry_id": 3}, NOW - 5), [3]),
    ]
    await replica.drop_pending_deletes(1)
    assert replica.has_pending_deletes
    assert await replica.pending_deletes() == pending[1:]
    await replica.drop_pending_deletes(1)
    assert not replica.has_pending_deletes
    assert await replica.pending_deletes() == []


async def test_nothing_pending_once_the_file_has_been_read(
    away: tuple[SharedReplica, MemoryStore, Counter[str]],
) -> None:
    replica, _, _ = away
    assert replica.has_pending_deletes  # unknown until the file is read
    assert await replica.pending_deletes() == []
    assert not replica.has_pending_deletes


async def test_following_applies_events_and_keeps_its_position_in_the_store(
    redis_url: str,
) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    writer = RedisTier(redis_url, namespace=namespace)
    expires_at = time.time() + 3600  # Redis expires the hash in real time
    first = SharedEntry(1, Row("p", "t", "m", "q", "k", NOW, expires_at), b"\x00\x00")
    assert await writer.publish_insert(first)
    store, reader = MemoryStore(), RedisTier(redis_url, namespace=namespace)
    replica = SharedReplica(reader, store, Counter(), clock=lambda: NOW)
    replica.start()
    # No saved position: a rebuild from the hashes, then the position at the stream's end.
    await eventually(lambda: _true(CURSOR_META in store.meta))
    assert store.applied == [first] and store.kept == [{1}] and replica.num_rebuilds == 1
    cursor = store.meta[CURSOR_META]
    event = DeleteEvent({"entry_id": None, "tenant": "t", "model": None}, None)
    assert await writer.publish_delete(event, [1])
    await eventually(lambda: _true(store.meta[CURSOR_META] != cursor))
    assert store.applied == [first, event] and replica.num_applied == 1
    await replica.close()
    await writer.aclose()


async def _true(value: bool) -> bool:
    return value


async def test_redis_away_gives_no_id_and_drops_the_insert(
    away: tuple[SharedReplica, MemoryStore, Counter[str]],
) -> None:
    replica, _, counters = away
    assert await replica.shared.next_id() is None
    await replica.publish_insert(
        SharedEntry(1, Row("p", "t", "m", "q", "k", 1.0, 2.0), b"\x00\x00")
    )
    assert counters["shared_publish_dropped"] == 1 and not counters["shared_published"]
    assert not replica.is_following and replica.stats() == {}  # not started
    replica.start()
    assert replica.is_following
    assert set(replica.stats()) == {
        "is_connected",
        "applied_events",
        "rebuilds",
        "failures",
    }

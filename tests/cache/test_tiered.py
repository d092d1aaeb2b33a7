from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from hasten.cache import (
    CachedAnswer,
    MemoryLRU,
    RedisStore,
    SQLiteStore,
    TieredCache,
    build_cache,
)
from hasten.errors import ConfigError

NOW = 1_000_000.0


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeL2:
    """An L2 whose writes can be held open, and which can be told to fail."""

    def __init__(self) -> None:
        self.data: dict[str, CachedAnswer] = {}
        self.release = asyncio.Event()
        self.release.set()
        self.is_put_ok = True
        self.is_raising = False
        self.is_closed = False
        self.gets = 0

    @property
    def is_healthy(self) -> bool:
        return not self.is_raising

    def counters(self) -> dict[str, int]:
        return {"gets": self.gets}

    async def get(self, key: str) -> CachedAnswer | None:
        self.gets += 1
        if self.is_raising:
            raise RuntimeError("bug in a store")
        return self.data.get(key)

    async def put(self, key: str, entry: CachedAnswer) -> bool:
        await self.release.wait()
        if self.is_raising:
            raise RuntimeError("bug in a store")
        if self.is_put_ok:
            self.data[key] = entry
        return self.is_put_ok

    async def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    async def close(self) -> None:
        self.is_closed = True


def answer(text: str = "hi", *, created_at: float = NOW, ttl_s: float = 3600.0) -> CachedAnswer:
    return CachedAnswer.from_body(
        text.encode(), endpoint="chat", ttl_s=ttl_s, created_at=created_at
    )


def tiered(l2: FakeL2 | None = None, clock: FakeClock | None = None) -> TieredCache:
    clock = clock or FakeClock()
    return TieredCache(MemoryLRU(1_000_000, clock=clock), l2, clock=clock)


async def test_memory_only() -> None:
    cache = tiered()
    assert await cache.get("k") is None
    cache.put("k", answer())
    got = await cache.get("k")
    assert got is not None and got.body == b"hi"
    stats = cache.stats()
    assert (stats["l1_hits"], stats["misses"], stats["writes"]) == (1, 1, 1)
    assert "l2_healthy" not in stats
    await cache.aclose()


async def test_l2_hit_is_promoted_to_l1() -> None:
    l2 = FakeL2()
    writer = tiered(l2)
    writer.put("k", answer())
    await writer.drain()
    reader = tiered(l2)
    assert await reader.get("k") is not None
    assert await reader.get("k") is not None
    assert l2.gets == 1
    stats = reader.stats()
    assert (stats["l1_hits"], stats["l2_hits"], stats["misses"]) == (1, 1, 0)
    assert stats["l2_healthy"] is True


async def test_put_does_not_wait_for_l2() -> None:
    l2 = FakeL2()
    l2.release.clear()
    cache = tiered(l2)
    cache.put("k", answer())
    assert await cache.get("k") is not None  # served from L1 while L2 is still writing
    assert cache.stats()["pending_writes"] == 1
    assert "k" not in l2.data
    l2.release.set()
    await cache.drain()
    assert "k" in l2.data
    assert cache.stats()["pending_writes"] == 0


async def test_l1_miss_is_told_before_l2_is_asked() -> None:
    l2 = FakeL2()
    cache = tiered(l2)
    told: list[int] = []

    def on_l1_miss() -> None:
        told.append(l2.gets)  # how many L2 gets had run when it was told

    assert await cache.get("k", on_l1_miss=on_l1_miss) is None
    assert told == [0] and l2.gets == 1
    cache.put("k", answer(created_at=NOW - 100.0))
    await cache.drain()
    assert await cache.get("k", on_l1_miss=on_l1_miss) is not None  # an L1 hit: not told
    assert await cache.get("k", max_age_s=50.0, on_l1_miss=on_l1_miss) is None  # too old
    assert told == [0, 1]


async def test_max_age() -> None:
    clock = FakeClock()
    l2 = FakeL2()
    cache = tiered(l2, clock)
    cache.put("k", answer(created_at=NOW - 100.0))
    await cache.drain()
    assert await cache.get("k", max_age_s=50.0) is None
    assert await cache.get("k", max_age_s=200.0) is not None
    assert l2.gets == 0  # L2 holds the same write; no point asking it
    fresh_reader = tiered(l2, clock)
    assert await fresh_reader.get("k", max_age_s=50.0) is None
    assert "k" in fresh_reader.l1  # still promoted: valid for requests without max-age
    assert await fresh_reader.get("k") is not None


async def test_expired_l2_entry_is_a_miss_and_not_promoted() -> None:
    l2 = FakeL2()
    l2.data["k"] = answer(created_at=NOW - 10.0, ttl_s=5.0)
    cache = tiered(l2)
    assert await cache.get("k") is None
    assert "k" not in cache.l1


async def test_write_errors_are_counted() -> None:
    l2 = FakeL2()
    cache = tiered(l2)
    l2.is_put_ok = False
    cache.put("a", answer())
    await cache.drain()
    l2.is_raising = True
    cache.put("b", answer())
    await cache.drain()
    stats = cache.stats()
    assert (stats["writes"], stats["write_errors"]) == (2, 2)
    assert await cache.get("a") is not None  # L1 still serves


async def test_l2_get_failure_is_a_miss() -> None:
    l2 = FakeL2()
    l2.is_raising = True
    cache = tiered(l2)
    assert await cache.get("k") is None
    assert cache.stats()["misses"] == 1


async def test_pending_writes_are_bounded() -> None:
    l2 = FakeL2()
    l2.release.clear()
    clock = FakeClock()
    cache = TieredCache(MemoryLRU(1_000_000, clock=clock), l2, max_pending_writes=3, clock=clock)
    for i in range(5):
        cache.put(f"k{i}", answer())
    assert cache.stats()["pending_writes"] == 3
    assert cache.stats()["writes_dropped"] == 2
    l2.release.set()
    await cache.drain()
    assert sorted(l2.data) == ["k0", "k1", "k2"]


async def test_delete_removes_from_both_tiers() -> None:
    l2 = FakeL2()
    cache = tiered(l2)
    cache.put("k", answer())
    await cache.drain()
    await cache.delete("k")
    assert "k" not in cache.l1 and "k" not in l2.data
    assert await cache.get("k") is None


async def test_aclose_drains_then_closes() -> None:
    l2 = FakeL2()
    l2.release.clear()
    cache = tiered(l2)
    cache.put("k", answer())
    closing = asyncio.ensure_future(cache.aclose())
    await asyncio.sleep(0)
    assert not l2.is_closed
    l2.release.set()
    await closing
    assert l2.is_closed and "k" in l2.data


async def test_with_sqlite_l2(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    cache = TieredCache(MemoryLRU(1_000_000), store)
    cache.put("k", CachedAnswer.from_body(b"{}", endpoint="chat", ttl_s=60.0))
    await cache.aclose()
    reopened = TieredCache(MemoryLRU(1_000_000), SQLiteStore(tmp_path / "cache.db"))
    try:
        assert await reopened.get("k") is not None
        assert reopened.stats()["l2_hits"] == 1
    finally:
        await reopened.aclose()


async def test_with_redis_l2(redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    cache = TieredCache(MemoryLRU(1_000_000), RedisStore(redis_url, namespace=namespace))
    cache.put("k", CachedAnswer.from_body(b"{}", endpoint="chat", ttl_s=60.0))
    await cache.aclose()
    other = TieredCache(MemoryLRU(1_000_000), RedisStore(redis_url, namespace=namespace))
    try:
        assert await other.get("k") is not None
        assert other.stats()["l2_hits"] == 1
    finally:
        await other.aclose()


async def test_build_cache(tmp_path: Path, redis_url: str) -> None:
    memory = build_cache("memory", l1_max_bytes=1000)
    assert memory.l2 is None and memory.l1.max_bytes == 1000
    sqlite_cache = build_cache("sqlite", sqlite_path=tmp_path / "c.db")
    assert isinstance(sqlite_cache.l2, SQLiteStore)
    redis_cache = build_cache("redis", redis_url=redis_url)
    assert isinstance(redis_cache.l2, RedisStore)
    for cache in (memory, sqlite_cache, redis_cache):
        await cache.aclose()


@pytest.mark.parametrize(
    ("backend", "kwargs"),
    [("sqlite", {}), ("redis", {}), ("memcached", {}), ("redis", {"redis_url": ""})],
)
def test_build_cache_rejects_bad_config(backend: str, kwargs: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        build_cache(backend, **kwargs)  # type: ignore[arg-type]

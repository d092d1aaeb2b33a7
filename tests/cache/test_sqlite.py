from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from hasten.cache.entry import CachedAnswer
from hasten.cache.sqlite_store import SQLiteStore


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.threads: set[str] = set()

    def __call__(self) -> float:
        self.threads.add(threading.current_thread().name)
        return self.now


def answer(
    text: str = "hello", *, ttl_s: float = 60.0, created_at: float = 1_000_000.0
) -> CachedAnswer:
    return CachedAnswer.from_body(
        text.encode(), endpoint="chat", ttl_s=ttl_s, created_at=created_at
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    sqlite_store = SQLiteStore(tmp_path / "cache.db", clock=clock)
    yield sqlite_store
    await sqlite_store.close()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "hasten.cache" and r.levelno == logging.WARNING]


async def eventually(predicate: Callable[[], Awaitable[bool]], attempts: int = 400) -> bool:
    """Polls an async predicate; bounded by attempts, not by wall-clock expectations."""
    for _ in range(attempts):
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_put_get_delete(store: SQLiteStore) -> None:
    stream = CachedAnswer.from_chunks(
        [b"a", b"", b"c"], endpoint="chat", ttl_s=60.0, created_at=1_000_000.0
    )
    assert await store.put("json", answer())
    assert await store.put("stream", stream)
    assert await store.get("json") == answer()
    got = await store.get("stream")
    assert got is not None and list(got.chunks or ()) == [b"a", b"", b"c"]
    assert await store.get("missing") is None
    assert await store.delete("json")
    assert not await store.delete("json")
    assert await store.get("json") is None
    assert store.is_healthy


async def test_overwrite(store: SQLiteStore) -> None:
    await store.put("k", answer("one"))
    await store.put("k", answer("two"))
    got = await store.get("k")
    assert got is not None and got.body == b"two"


async def test_work_runs_off_the_event_loop_thread(store: SQLiteStore, clock: FakeClock) -> None:
    await store.put("k", answer())
    await store.get("k")
    assert clock.threads and all(name.startswith("hasten-sqlite") for name in clock.threads)


async def test_survives_restart(tmp_path: Path, clock: FakeClock) -> None:
    first = SQLiteStore(tmp_path / "cache.db", clock=clock)
    await first.put("k", answer("persisted"))
    await first.close()
    second = SQLiteStore(tmp_path / "cache.db", clock=clock)
    try:
        got = await second.get("k")
        assert got is not None and got.body == b"persisted"
    finally:
        await second.close()


async def test_creates_missing_directories(tmp_path: Path, clock: FakeClock) -> None:
    nested = SQLiteStore(tmp_path / "a" / "b" / "cache.db", clock=clock)
    try:
        assert await nested.put("k", answer())
        assert await nested.get("k") is not None
    finally:
        await nested.close()


async def test_expired_rows_are_ignored(store: SQLiteStore, clock: FakeClock) -> None:
    await store.put("k", answer(ttl_s=10.0))
    clock.now += 9.0
    assert await store.get("k") is not None
    clock.now += 1.0
    assert await store.get("k") is None
    assert await store.put("late", answer(ttl_s=10.0))  # already expired: accepted, not stored
    assert await store.get("late") is None


async def test_budget_evicts_expired_then_least_recently_used(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "cache.db"
    small = SQLiteStore(path, max_bytes=20_000, clock=clock)
    try:
        await small.put("old", answer("x" * 1000, ttl_s=5.0))
        clock.now += 10.0  # "old" is now expired
        for i in range(40):
            clock.now += 100.0
            await small.put(f"k{i}", answer("y" * 1000, created_at=clock.now, ttl_s=1e6))
            if i >= 1:
                assert await small.get("k0") is not None  # keeps k0 recently used
        assert await small.get("k39") is not None
        assert await small.get("k1") is None
    finally:
        await small.close()
    with sqlite3.connect(path) as conn:
        keys = {row[0] for row in conn.execute("SELECT key FROM hasten_cache_v1")}
        total_bytes = conn.execute("SELECT total(size_bytes) FROM hasten_cache_v1").fetchone()[0]
    assert "old" not in keys
    assert "k0" in keys
    assert total_bytes <= 20_000
    assert 5 < len(keys) < 40


async def test_damaged_row_is_a_miss_and_removed(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "cache.db"
    sqlite_store = SQLiteStore(path, clock=clock)
    try:
        await sqlite_store.put("k", answer())
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE hasten_cache_v1 SET value = x'ff00'")
        assert await sqlite_store.get("k") is None
        assert sqlite_store.is_healthy
        assert not await sqlite_store.delete("k")  # already removed by the failed read
    finally:
        await sqlite_store.close()


async def test_concurrent_calls(store: SQLiteStore) -> None:
    await asyncio.gather(*(store.put(f"k{i}", answer(str(i))) for i in range(50)))
    got = await asyncio.gather(*(store.get(f"k{i}") for i in range(50)))
    assert [g.body if g else None for g in got] == [str(i).encode() for i in range(50)]


async def test_calls_after_close_miss(tmp_path: Path) -> None:
    sqlite_store = SQLiteStore(tmp_path / "cache.db")
    await sqlite_store.put("k", answer(created_at=0.0, ttl_s=1e12))
    await sqlite_store.close()
    await sqlite_store.close()
    assert await sqlite_store.get("k") is None
    assert not await sqlite_store.put("k", answer())


async def assert_degraded(sqlite_store: SQLiteStore, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hasten.cache"):
        for _ in range(5):
            assert await sqlite_store.get("k") is None
            assert not await sqlite_store.put("k", answer())
            assert not await sqlite_store.delete("k")
    assert not sqlite_store.is_healthy
    assert len(warnings_of(caplog)) == 1


async def test_garbage_file_is_moved_aside_and_replaced(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"this is not a database" * 500)
    with caplog.at_level(logging.WARNING, logger="hasten.cache"):
        sqlite_store = SQLiteStore(path, retry_backoff_s=0.0, clock=clock)
        try:
            assert await eventually(lambda: sqlite_store.put("k", answer()))
            assert await sqlite_store.get("k") == answer()
            assert sqlite_store.is_healthy
            assert sqlite_store.counters()["corruptions"] == 1
        finally:
            await sqlite_store.close()
    (kept,) = sqlite_store.moved_aside
    assert kept.name.startswith("cache.db.corrupt-")
    assert kept.read_bytes() == b"this is not a database" * 500  # kept for inspection
    (warning,) = warnings_of(caplog)
    assert str(kept) in warning.getMessage()


async def test_unreadable_path_degrades_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    sqlite_store = SQLiteStore(not_a_dir / "cache.db", retry_backoff_s=0.0)
    try:
        await assert_degraded(sqlite_store, caplog)
    finally:
        await sqlite_store.close()


async def test_directory_path_degrades_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_store = SQLiteStore(tmp_path, retry_backoff_s=0.0)
    try:
        await assert_degraded(sqlite_store, caplog)
    finally:
        await sqlite_store.close()


@pytest.fixture
def locker(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "cache.db", isolation_level=None, check_same_thread=False)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


async def test_database_locked_before_open_degrades_then_recovers(
    tmp_path: Path, locker: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    locker.execute("CREATE TABLE other (x)")
    locker.execute("BEGIN EXCLUSIVE")
    locker.execute("INSERT INTO other VALUES (1)")
    sqlite_store = SQLiteStore(tmp_path / "cache.db", busy_timeout_s=0.05, retry_backoff_s=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="hasten.cache"):
            for _ in range(5):
                assert await sqlite_store.get("k") is None
                assert not await sqlite_store.put("k", answer(created_at=0.0, ttl_s=1e12))
        assert not sqlite_store.is_healthy
        assert len(warnings_of(caplog)) == 1
        locker.execute("COMMIT")

        async def is_writable() -> bool:
            return await sqlite_store.put("k", answer("back", created_at=0.0, ttl_s=1e12))

        assert await eventually(is_writable)
        assert sqlite_store.is_healthy
        got = await sqlite_store.get("k")
        assert got is not None and got.body == b"back"
    finally:
        await sqlite_store.close()


async def test_write_lock_in_wal_mode_drops_writes_then_recovers(
    tmp_path: Path, locker: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_store = SQLiteStore(tmp_path / "cache.db", busy_timeout_s=0.05, retry_backoff_s=0.05)
    try:
        assert await sqlite_store.put("k", answer("before", created_at=0.0, ttl_s=1e12))
        locker.execute("BEGIN EXCLUSIVE")
        locker.execute("DELETE FROM hasten_cache_v1")
        with caplog.at_level(logging.WARNING, logger="hasten.cache"):
            for _ in range(5):
                assert not await sqlite_store.put("k2", answer(created_at=0.0, ttl_s=1e12))
        assert not sqlite_store.is_healthy
        assert len(warnings_of(caplog)) == 1
        locker.execute("ROLLBACK")

        async def is_writable() -> bool:
            return await sqlite_store.put("k2", answer("after", created_at=0.0, ttl_s=1e12))

        assert await eventually(is_writable)
        assert sqlite_store.is_healthy
        got = await sqlite_store.get("k")
        assert got is not None and got.body == b"before"
    finally:
        await sqlite_store.close()

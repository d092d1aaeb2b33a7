"""Stored answers altered on disk or in Redis are never served; corrupt files are replaced.

Real SQLite files with bytes written into them, a real gateway restarted on the same file,
a real redis-server.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from hasten.cache import CachedAnswer, RedisStore, SQLiteStore
from hasten.config import CacheConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread

NOW = 1_000_000.0


def _answer(text: str) -> CachedAnswer:
    return CachedAnswer.from_body(text.encode(), endpoint="chat", ttl_s=3600.0, created_at=NOW)


async def _eventually(predicate: Callable[[], Awaitable[bool]], attempts: int = 400) -> bool:
    for _ in range(attempts):
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return False


def _overwrite(path: Path, needle: bytes, replacement: bytes) -> None:
    data = path.read_bytes()
    offset = data.index(needle)
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(replacement)


def test_answer_altered_in_the_file_is_a_miss_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    cache = CacheConfig(backend="sqlite", sqlite_path=str(path))
    body = chat_body("What is the integrity of this answer?")
    with ServerThread(build_app(SimConfig())) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=cache)
        with running_gateway(config) as gateway:
            first = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
            assert first.headers["x-hasten-cache"] == "miss"
        text = first.json()["choices"][0]["message"]["content"]
        needle = max(text.split(), key=len).encode()
        assert len(needle) >= 5
        _overwrite(path, needle, b"XXXXX")  # 5 bytes of the stored answer, as in the probe
        with running_gateway(config) as gateway:
            again = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
            stats = httpx.get(f"{gateway.url}/stats").json()["cache"]
    assert again.headers["x-hasten-cache"] == "miss"
    assert again.json()["choices"][0]["message"]["content"] == text
    assert stats["l2_bad_entries"] == 1
    assert stats["l2_healthy"] is True


async def test_bad_checksum_is_a_miss_deleted_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path, clock=lambda: NOW)
    try:
        assert await store.put("k", _answer("the original answer"))
        with sqlite3.connect(path) as conn:
            (value,) = conn.execute("SELECT value FROM hasten_cache_v1").fetchone()
            conn.execute("UPDATE hasten_cache_v1 SET value = ?", (value.replace(b"orig", b"ORIG"),))
        assert await store.get("k") is None
        assert store.counters() == {"bad_entries": 1, "outdated_entries": 0, "corruptions": 0}
        assert not await store.delete("k")  # deleted by the failed read
    finally:
        await store.close()


async def test_entry_without_checksum_is_an_uncounted_miss(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path, clock=lambda: NOW)
    try:
        assert await store.put("k", _answer("old"))
        header = b'{"k":"json","e":"chat","c":1000000.0,"t":3600.0}'
        version_1 = b"\x01" + len(header).to_bytes(4, "big") + header + b"old"
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE hasten_cache_v1 SET value = ?", (version_1,))
        assert await store.get("k") is None
        assert store.counters() == {"bad_entries": 0, "outdated_entries": 1, "corruptions": 0}
    finally:
        await store.close()


async def test_corrupt_file_at_startup_is_replaced_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path, clock=lambda: NOW)
    for i in range(300):
        assert await store.put(f"k{i}", _answer(f"answer {i} " * 20))
    await store.close()
    # Garbage over every page but the first (the header): the tables' b-trees are gone.
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(4096)
        file.write(random.Random(7).randbytes(size - 4096))
    store = SQLiteStore(path, clock=lambda: NOW, retry_backoff_s=0.0)
    try:
        assert await _eventually(lambda: store.put("new", _answer("fresh")))
        assert await store.get("new") == _answer("fresh")
        assert store.counters()["corruptions"] == 1
        assert store.is_healthy
    finally:
        await store.close()
    (kept,) = store.moved_aside
    assert kept.parent == tmp_path and kept.name.startswith("cache.db.corrupt-")
    assert kept.stat().st_size == size  # kept whole for inspection
    assert sum(str(kept) in r.getMessage() for r in caplog.records) == 1  # logged once
    # The next start finds a good file: nothing moved, nothing lost since.
    store = SQLiteStore(path, clock=lambda: NOW)
    try:
        assert await store.get("new") == _answer("fresh")
        assert store.counters()["corruptions"] == 0 and store.moved_aside == []
    finally:
        await store.close()


async def test_garbage_in_db_and_wal_mid_run_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path, clock=lambda: NOW, retry_backoff_s=0.0)
    for i in range(300):
        assert await store.put(f"k{i}", _answer(f"answer {i} " * 20))
    rng = random.Random(11)
    for target in (path, Path(f"{path}-wal")):
        size = target.stat().st_size
        with target.open("r+b") as file:
            for _ in range(20):
                file.seek(rng.randrange(100, max(101, size - 512)))
                file.write(rng.randbytes(512))
    await store.close()  # checkpoints the WAL, garbage and all, into the file
    store = SQLiteStore(path, clock=lambda: NOW, retry_backoff_s=0.0)
    try:
        hits = [await store.get(f"k{i}") for i in range(300)]
        counters = store.counters()
    finally:
        await store.close()
    # What is served is intact; what is lost was noticed (counted), not silently dropped.
    assert all(h.body == f"answer {i} ".encode() * 20 for i, h in enumerate(hits) if h)
    num_lost = sum(h is None for h in hits)
    assert num_lost > 0
    assert counters["bad_entries"] + counters["corruptions"] > 0


async def test_redis_entry_with_a_bad_checksum_is_a_miss(redis_url: str) -> None:
    namespace = f"hasten-test-{os.getpid()}-integrity:"
    store = RedisStore(redis_url, namespace=namespace, clock=lambda: NOW)
    raw = Redis.from_url(redis_url)
    try:
        assert await store.put("k", _answer("from redis"))
        value = await raw.get(namespace + "k")
        assert isinstance(value, bytes)
        await raw.set(namespace + "k", value.replace(b"from", b"FROM"))
        assert await store.get("k") is None
        assert store.counters()["bad_entries"] == 1
        assert await raw.exists(namespace + "k") == 0
    finally:
        await raw.aclose()
        await store.close()

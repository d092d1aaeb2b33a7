from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from hasten.cache.entry import CachedAnswer
from hasten.cache.redis_store import RedisStore
from tests.support.servers import free_port, wait_listening


class RestartableRedis:
    """A redis-server that tests can stop, freeze and restart on the same port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self._binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._workdir = tempfile.mkdtemp(prefix="hasten-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            is_up = wait_listening(self._proc, self.port, 10.0, poll_s=0.02)
        except TimeoutError:
            is_up = False
        if not is_up:
            raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def freeze(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def cleanup(self) -> None:
        if self._proc is not None:
            self.thaw()
        self.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)


@pytest.fixture
def own_redis() -> Iterator[RestartableRedis]:
    server = RestartableRedis()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    redis_store = RedisStore(redis_url, namespace=f"test-{uuid.uuid4().hex}:")
    yield redis_store
    await redis_store.close()


def answer(text: str = "hello", *, ttl_s: float = 60.0) -> CachedAnswer:
    return CachedAnswer.from_body(text.encode(), endpoint="chat", ttl_s=ttl_s)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "hasten.cache" and r.levelno == logging.WARNING]


async def eventually(predicate: Callable[[], Awaitable[bool]], attempts: int = 400) -> bool:
    """Polls an async predicate; bounded by attempts, not by wall-clock expectations."""
    for _ in range(attempts):
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_put_get_delete(store: RedisStore) -> None:
    stream = CachedAnswer.from_chunks([b"a", b"b"], endpoint="chat", ttl_s=60.0)
    assert await store.put("json", answer())
    assert await store.put("stream", stream)
    got = await store.get("json")
    assert got is not None and got.body == b"hello"
    assert await store.get("stream") == stream
    assert await store.get("missing") is None
    assert await store.delete("json")
    assert not await store.delete("json")
    assert await store.get("json") is None
    assert store.is_healthy


async def test_written_with_remaining_ttl_under_namespace(redis_url: str) -> None:
    namespace = f"ns-{uuid.uuid4().hex}:"
    redis_store = RedisStore(redis_url, namespace=namespace)
    raw = Redis.from_url(redis_url)
    try:
        old = CachedAnswer.from_body(
            b"x", endpoint="chat", ttl_s=100.0, created_at=time.time() - 40
        )
        assert await redis_store.put("k", old)
        ttl_ms = await raw.pttl(namespace + "k")
        assert 0 < ttl_ms <= 60_000
        expired = CachedAnswer.from_body(b"x", endpoint="chat", ttl_s=1.0, created_at=0.0)
        assert await redis_store.put("gone", expired)
        assert await raw.exists(namespace + "gone") == 0
    finally:
        await raw.aclose()
        await redis_store.close()


async def test_foreign_value_is_a_miss_and_removed(redis_url: str) -> None:
    namespace = f"ns-{uuid.uuid4().hex}:"
    redis_store = RedisStore(redis_url, namespace=namespace)
    raw = Redis.from_url(redis_url)
    try:
        await raw.set(namespace + "k", b"\xff not an entry")
        assert await redis_store.get("k") is None
        assert await raw.exists(namespace + "k") == 0
        assert redis_store.is_healthy
    finally:
        await raw.aclose()
        await redis_store.close()


async def test_redis_killed_and_restarted(
    own_redis: RestartableRedis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_store = RedisStore(own_redis.url, retry_backoff_s=0.05)
    try:
        assert await redis_store.put("k", answer("before"))
        assert await redis_store.get("k") is not None
        own_redis.stop()
        with caplog.at_level(logging.INFO, logger="hasten.cache"):
            for _ in range(5):
                assert await redis_store.get("k") is None
                assert not await redis_store.put("k", answer())
                await asyncio.sleep(0.06)  # past the back-off: each round really retries
            assert not redis_store.is_healthy
            assert len(warnings_of(caplog)) == 1

            own_redis.start()

            async def is_writable() -> bool:
                return await redis_store.put("k", answer("after"))

            assert await eventually(is_writable)
        assert redis_store.is_healthy
        got = await redis_store.get("k")
        assert got is not None and got.body == b"after"
        assert any("recovered" in r.getMessage() for r in caplog.records)
    finally:
        await redis_store.close()


async def test_down_redis_is_not_hammered(own_redis: RestartableRedis) -> None:
    redis_store = RedisStore(own_redis.url, retry_backoff_s=3600.0)
    calls = 0
    real_get = redis_store._client.get

    async def counting_get(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real_get(*args, **kwargs)

    redis_store._client.get = counting_get  # type: ignore[method-assign]
    try:
        own_redis.stop()
        for _ in range(20):
            assert await redis_store.get("k") is None
            assert not await redis_store.put("k", answer())
        assert calls == 1
    finally:
        await redis_store.close()


async def test_hung_redis_times_out_as_a_miss(
    own_redis: RestartableRedis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_store = RedisStore(own_redis.url, retry_backoff_s=0.0)
    try:
        assert await redis_store.put("k", answer())
        own_redis.freeze()
        with caplog.at_level(logging.WARNING, logger="hasten.cache"):
            assert await redis_store.get("k") is None
            assert not await redis_store.put("k", answer())
        assert len(warnings_of(caplog)) == 1
        own_redis.thaw()

        async def is_readable() -> bool:
            return await redis_store.get("k") is not None

        assert await eventually(is_readable)
    finally:
        await redis_store.close()


async def test_never_started_redis_is_a_miss(caplog: pytest.LogCaptureFixture) -> None:
    redis_store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with caplog.at_level(logging.WARNING, logger="hasten.cache"):
            assert await redis_store.get("k") is None
            assert not await redis_store.put("k", answer())
            assert not await redis_store.delete("k")
        assert len(warnings_of(caplog)) == 1
    finally:
        await redis_store.close()


async def test_calls_after_close_miss(redis_url: str) -> None:
    redis_store = RedisStore(redis_url, namespace=f"test-{uuid.uuid4().hex}:")
    await redis_store.put("k", answer())
    await redis_store.close()
    await redis_store.close()
    assert await redis_store.get("k") is None
    assert not await redis_store.put("k", answer())


async def test_no_second_failure_from_stale_pooled_connections_after_a_restart(
    own_redis: RestartableRedis,
) -> None:
    # Generous timeouts: a slow moment of a loaded machine must not count as a failure here
    # (CI once saw 8 connects at once miss the 0.25 s default); a dead connection fails fast.
    redis_store = RedisStore(
        own_redis.url, retry_backoff_s=0.05, connect_timeout_s=2.0, op_timeout_s=2.0
    )
    try:
        # Eight connections in the pool, all to the server that is about to go away.
        assert all(await asyncio.gather(*(redis_store.put(f"k{i}", answer()) for i in range(8))))
        own_redis.stop()
        assert await redis_store.get("k0") is None  # the one failure a restart costs
        own_redis.start()
        await asyncio.sleep(0.1)  # past the back-off
        failures = redis_store.counters()["failures"]
        for _ in range(3):  # concurrent calls take every pooled connection
            await asyncio.gather(*(redis_store.put(f"k{i}", answer()) for i in range(8)))
            await asyncio.sleep(0.1)
        assert redis_store.counters()["failures"] == failures
        assert redis_store.is_healthy
    finally:
        await redis_store.close()

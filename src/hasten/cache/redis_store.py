"""L2, shared: answers in Redis with native expiry; a dead Redis costs a miss, not an outage."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from hasten.cache.entry import CachedAnswer
from hasten.errors import OutdatedCacheEntry
from hasten.storage.redis import redis_client

_LOG = logging.getLogger("hasten.cache")

_FAILURES = (RedisError, OSError, TimeoutError)


class RedisStore:
    """Answers under ``namespace`` in Redis, written with ``SET ... PX <remaining ttl>``.

    Never raises into the request: on failure it logs one warning, serves misses and drops
    writes, and leaves Redis alone for ``retry_backoff_s`` before trying again. Short socket
    timeouts bound what a hung Redis can cost one request.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "hasten:",
        connect_timeout_s: float = 0.25,
        op_timeout_s: float = 0.25,
        retry_backoff_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.namespace = namespace
        self._retry_backoff_s = retry_backoff_s
        self._clock = clock
        self._client: Redis = redis_client(
            url, connect_timeout_s=connect_timeout_s, op_timeout_s=op_timeout_s
        )
        self._is_healthy = True
        self._retry_at = 0.0  # time.monotonic() before which we don't contact Redis
        self._is_closed = False
        self._num_failures = 0
        self._num_bad_entries = 0
        self._num_outdated_entries = 0

    @property
    def is_healthy(self) -> bool:
        return self._is_healthy

    def counters(self) -> dict[str, int]:
        """Failed Redis calls; entries dropped for a bad checksum or an old format."""
        return {
            "failures": self._num_failures,
            "bad_entries": self._num_bad_entries,
            "outdated_entries": self._num_outdated_entries,
        }

    async def get(self, key: str) -> CachedAnswer | None:
        """The stored entry if present and unexpired; None on a miss or any failure."""
        if not self._is_usable():
            return None
        try:
            data = await self._client.get(self.namespace + key)
        except _FAILURES as exc:
            await self._on_failure(exc)
            return None
        self._on_success()
        if not isinstance(data, bytes):  # None: a plain miss
            return None
        try:
            entry = CachedAnswer.decode(data)
        except OutdatedCacheEntry:
            self._num_outdated_entries += 1
            await self.delete(key)
            return None
        except ValueError as exc:
            self._num_bad_entries += 1
            if self._num_bad_entries == 1:  # the rest are only counted
                _LOG.warning("Redis cache: dropped a damaged entry (%s)", exc)
            await self.delete(key)
            return None
        return entry if entry.is_fresh(self._clock()) else None

    async def put(self, key: str, entry: CachedAnswer) -> bool:
        """Stores ``entry`` for its remaining TTL; False if the write was dropped."""
        ttl_ms = int((entry.expires_at - self._clock()) * 1000)
        if ttl_ms <= 0:
            return True
        if not self._is_usable():
            return False
        try:
            await self._client.set(self.namespace + key, entry.encode(), px=ttl_ms)
        except _FAILURES as exc:
            await self._on_failure(exc)
            return False
        self._on_success()
        return True

    async def delete(self, key: str) -> bool:
        """Removes ``key``; True if it existed."""
        if not self._is_usable():
            return False
        try:
            deleted = await self._client.delete(self.namespace + key)
        except _FAILURES as exc:
            await self._on_failure(exc)
            return False
        self._on_success()
        return bool(deleted)

    async def close(self) -> None:
        """Closes the connection pool; later calls miss."""
        if self._is_closed:
            return
        self._is_closed = True
        with contextlib.suppress(*_FAILURES):
            await self._client.aclose()

    def _is_usable(self) -> bool:
        return not self._is_closed and time.monotonic() >= self._retry_at

    async def _on_failure(self, exc: BaseException) -> None:
        self._num_failures += 1
        self._retry_at = time.monotonic() + self._retry_backoff_s
        if isinstance(exc, RedisConnectionError):
            # The idle pooled connections lead to the same lost server: drop them now, so
            # the first call after the back-off does not find one of them.
            with contextlib.suppress(*_FAILURES):
                await self._client.connection_pool.disconnect(inuse_connections=False)
        if self._is_healthy:
            self._is_healthy = False
            _LOG.warning(
                "Redis cache unavailable (%s: %s); serving misses, retrying in %.1f s",
                type(exc).__name__,
                exc,
                self._retry_backoff_s,
            )

    def _on_success(self) -> None:
        if not self._is_healthy:
            self._is_healthy = True
            _LOG.info("Redis cache recovered")

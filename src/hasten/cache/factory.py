"""Builds the configured cache stack."""

from __future__ import annotations

import os

from hasten.cache.memory import MemoryLRU
from hasten.cache.redis_store import RedisStore
from hasten.cache.sqlite_store import SQLiteStore
from hasten.cache.tiered import L2Store, TieredCache
from hasten.errors import ConfigError

BACKENDS = ("memory", "sqlite", "redis")


def build_cache(
    backend: str,
    *,
    l1_max_bytes: int = 64 * 1024 * 1024,
    sqlite_path: str | os.PathLike[str] | None = None,
    redis_url: str | None = None,
    sqlite_max_bytes: int = 1024 * 1024 * 1024,
) -> TieredCache:
    """L1 in memory plus the L2 named by ``backend``: "memory" (none), "sqlite" or "redis"."""
    l2: L2Store | None
    if backend == "memory":
        l2 = None
    elif backend == "sqlite":
        if sqlite_path is None:
            raise ConfigError("cache backend 'sqlite' needs a sqlite_path")
        l2 = SQLiteStore(sqlite_path, max_bytes=sqlite_max_bytes)
    elif backend == "redis":
        if not redis_url:
            raise ConfigError("cache backend 'redis' needs a redis_url")
        l2 = RedisStore(redis_url)
    else:
        raise ConfigError(f"unknown cache backend {backend!r}; expected one of {BACKENDS}")
    return TieredCache(MemoryLRU(l1_max_bytes), l2)

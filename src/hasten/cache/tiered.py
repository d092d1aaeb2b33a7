"""The cache the request path talks to: L1 in memory in front of an optional shared L2."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from hasten.cache.entry import CachedAnswer
from hasten.cache.memory import MemoryLRU

_LOG = logging.getLogger("hasten.cache")

# Beyond this many queued L2 writes the L2 is not keeping up: drop instead of piling up memory.
_DEFAULT_MAX_PENDING_WRITES = 1024


class L2Store(Protocol):
    """What TieredCache needs from a second tier; implementations never raise on failure."""

    @property
    def is_healthy(self) -> bool: ...

    def counters(self) -> Mapping[str, int]:
        """The store's own counts (bad entries dropped, ...), shown as ``l2_<name>``."""
        ...

    async def get(self, key: str) -> CachedAnswer | None: ...

    async def put(self, key: str, entry: CachedAnswer) -> bool: ...

    async def delete(self, key: str) -> bool: ...

    async def close(self) -> None: ...


class TieredCache:
    """Looks up L1 then L2 (promoting L2 hits); writes L1 at once and L2 in the background."""

    def __init__(
        self,
        l1: MemoryLRU,
        l2: L2Store | None = None,
        *,
        max_pending_writes: int = _DEFAULT_MAX_PENDING_WRITES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.l1 = l1
        self.l2 = l2
        self._max_pending_writes = max_pending_writes
        self._clock = clock
        self._pending: set[asyncio.Task[None]] = set()
        self._l1_hits = 0
        self._l2_hits = 0
        self._l2_lookups = 0
        self._misses = 0
        self._writes = 0
        self._write_errors = 0
        self._writes_dropped = 0
        # Told of every delete made here, after both tiers dropped the key, so that other
        # processes sharing L2 drop their L1 copies too (``hasten serve --workers``).
        self.on_delete: Callable[[str], None] | None = None

    async def get(
        self,
        key: str,
        *,
        max_age_s: float | None = None,
        on_l1_miss: Callable[[], None] | None = None,
    ) -> CachedAnswer | None:
        """A fresh answer for ``key``, younger than ``max_age_s`` when given; never raises.
        ``on_l1_miss`` is called as soon as L1 cannot answer (before L2 is asked)."""
        now = self._clock()
        entry = self.l1.get(key)
        if entry is not None:
            # L2 holds the same write or an older one, so it cannot satisfy max-age better.
            if entry.is_fresh(now, max_age_s):
                self._l1_hits += 1
                return entry
            self._misses += 1
            if on_l1_miss is not None:
                on_l1_miss()
            return None
        if on_l1_miss is not None:
            on_l1_miss()
        if self.l2 is not None:
            self._l2_lookups += 1
            entry = await self._l2_get(key)
            if entry is not None and entry.is_fresh(now):
                self.l1.put(key, entry)
                if entry.is_fresh(now, max_age_s):
                    self._l2_hits += 1
                    return entry
        self._misses += 1
        return None

    def put(self, key: str, entry: CachedAnswer) -> None:
        """Stores in L1 now and schedules the L2 write, so the response is never delayed.

        Must be called on the event loop when there is an L2.
        """
        self._writes += 1
        self.l1.put(key, entry)
        if self.l2 is None:
            return
        if len(self._pending) >= self._max_pending_writes:
            self._writes_dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self._l2_put(self.l2, key, entry))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def keep_body(self, key: str, entry: CachedAnswer, body: bytes) -> None:
        """Keeps a stream answer's merged ``body`` beside it in L1, where ``entry`` still
        is ``key``'s: every later non-stream hit is served it as it is. L2 is not written:
        its copy is the same answer, and merging again after a promotion is cheap enough."""
        self.l1.swap(key, entry, entry.with_body(body))

    async def delete(self, key: str) -> bool:
        """Removes ``key`` from both tiers; True if either held it."""
        was_held = self.l1.delete(key)
        if self.l2 is not None:
            try:
                was_held = await self.l2.delete(key) or was_held
            except Exception:
                _LOG.warning("L2 cache delete failed", exc_info=True)
        if self.on_delete is not None:
            self.on_delete(key)
        return was_held

    def forget(self, key: str) -> None:
        """Drops ``key`` from L1 only: another process deleted it from the shared tier."""
        self.l1.delete(key)

    async def drain(self) -> None:
        """Waits for every scheduled L2 write (tests and shutdown)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def aclose(self) -> None:
        """Finishes pending writes, then closes L2."""
        await self.drain()
        if self.l2 is not None:
            await self.l2.close()

    def stats(self) -> dict[str, int | bool]:
        """Counters for metrics: hits per tier, misses, writes and their failures."""
        stats: dict[str, int | bool] = {
            "l1_hits": self._l1_hits,
            "l2_hits": self._l2_hits,
            "misses": self._misses,
            "writes": self._writes,
            "write_errors": self._write_errors,
            "writes_dropped": self._writes_dropped,
            "pending_writes": len(self._pending),
            "l1_entries": len(self.l1),
            "l1_bytes": self.l1.size_bytes,
            "l1_evictions": self.l1.evictions,
        }
        if self.l2 is not None:
            stats["l2_healthy"] = self.l2.is_healthy
            stats["l2_lookups"] = self._l2_lookups
            for name, count in self.l2.counters().items():
                stats[f"l2_{name}"] = count
        return stats

    async def _l2_get(self, key: str) -> CachedAnswer | None:
        assert self.l2 is not None
        try:
            return await self.l2.get(key)
        except Exception:
            # Stores swallow their own failures; reaching this is a bug, but still only a miss.
            _LOG.warning("L2 cache get failed", exc_info=True)
            return None

    async def _l2_put(self, l2: L2Store, key: str, entry: CachedAnswer) -> None:
        try:
            is_written = await l2.put(key, entry)
        except Exception:
            _LOG.warning("L2 cache put failed", exc_info=True)
            is_written = False
        if not is_written:
            self._write_errors += 1

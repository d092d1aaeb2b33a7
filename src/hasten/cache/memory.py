"""L1: an in-process LRU bounded in bytes."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from hasten.cache.entry import CachedAnswer

# Dict slot, key object and linked-list node per entry, so tiny entries still cost something.
_ENTRY_OVERHEAD_BYTES = 128


class MemoryLRU:
    """Least-recently-used answers within ``max_bytes``; expired entries are dropped on read.

    Not thread-safe: it lives on the event loop thread.
    """

    def __init__(self, max_bytes: int, *, clock: Callable[[], float] = time.time) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[CachedAnswer, int]] = OrderedDict()
        self._size_bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.expirations = 0
        self.rejections = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def get(self, key: str) -> CachedAnswer | None:
        """The entry if present and within its TTL; marks it most recently used."""
        slot = self._entries.get(key)
        if slot is None:
            self.misses += 1
            return None
        entry = slot[0]
        if not entry.is_fresh(self._clock()):
            self._remove(key)
            self.expirations += 1
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: str, entry: CachedAnswer) -> bool:
        """Stores ``entry``, evicting the least recently used; False if it alone is too big."""
        cost_bytes = len(key) + entry.size_bytes + _ENTRY_OVERHEAD_BYTES
        if key in self._entries:
            self._remove(key)
        if cost_bytes > self.max_bytes:
            self.rejections += 1
            return False
        while self._size_bytes + cost_bytes > self.max_bytes:
            _, (_, evicted_bytes) = self._entries.popitem(last=False)
            self._size_bytes -= evicted_bytes
            self.evictions += 1
        self._entries[key] = (entry, cost_bytes)
        self._size_bytes += cost_bytes
        return True

    def swap(self, key: str, old: CachedAnswer, new: CachedAnswer) -> bool:
        """Replaces ``key``'s entry with ``new`` if it still is ``old`` (the same object:
        neither rewritten nor evicted since it was read); False otherwise."""
        slot = self._entries.get(key)
        if slot is None or slot[0] is not old:
            return False
        if len(key) + new.size_bytes + _ENTRY_OVERHEAD_BYTES > self.max_bytes:
            return False  # too big alone: the entry read stays as it was
        return self.put(key, new)

    def delete(self, key: str) -> bool:
        """Removes ``key``; True if it was present."""
        if key not in self._entries:
            return False
        self._remove(key)
        return True

    def clear(self) -> None:
        self._entries.clear()
        self._size_bytes = 0

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self._entries),
            "size_bytes": self._size_bytes,
            "max_bytes": self.max_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "expirations": self.expirations,
            "rejections": self.rejections,
        }

    def _remove(self, key: str) -> None:
        _, cost_bytes = self._entries.pop(key)
        self._size_bytes -= cost_bytes

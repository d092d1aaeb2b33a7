from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache.entry import CachedAnswer
from hasten.cache.memory import MemoryLRU


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def answer(
    payload_bytes: int = 10, *, ttl_s: float = 60.0, created_at: float = 1000.0
) -> CachedAnswer:
    return CachedAnswer.from_body(
        b"x" * payload_bytes, endpoint="chat", ttl_s=ttl_s, created_at=created_at
    )


def test_put_get_delete_clear() -> None:
    lru = MemoryLRU(1_000_000, clock=FakeClock())
    entry = answer()
    assert lru.put("a", entry)
    assert lru.get("a") is entry
    assert "a" in lru and len(lru) == 1
    assert lru.delete("a") and not lru.delete("a")
    assert lru.get("a") is None
    lru.put("b", entry)
    lru.clear()
    assert len(lru) == 0 and lru.size_bytes == 0
    assert (lru.hits, lru.misses) == (1, 1)


def test_evicts_least_recently_used_within_byte_budget() -> None:
    one = answer(1000)
    lru = MemoryLRU(3 * (1 + one.size_bytes + 128), clock=FakeClock())
    for key in "abc":
        lru.put(key, one)
    assert lru.get("a") is one  # now b is the least recently used
    lru.put("d", one)
    assert "b" not in lru
    assert all(k in lru for k in "acd")
    assert lru.evictions == 1
    assert lru.size_bytes <= lru.max_bytes


def test_entry_larger_than_budget_is_rejected() -> None:
    lru = MemoryLRU(500, clock=FakeClock())
    lru.put("small", answer(10))
    assert not lru.put("big", answer(10_000))
    assert "big" not in lru and "small" in lru
    assert lru.rejections == 1


def test_replacing_a_key_updates_size() -> None:
    lru = MemoryLRU(1_000_000, clock=FakeClock())
    lru.put("a", answer(10_000))
    lru.put("a", answer(10))
    assert len(lru) == 1
    assert lru.size_bytes < 1000


def test_expired_entries_are_dropped_on_read() -> None:
    clock = FakeClock()
    lru = MemoryLRU(1_000_000, clock=clock)
    lru.put("a", answer(ttl_s=5.0))
    clock.now += 4.9
    assert lru.get("a") is not None
    clock.now += 0.2
    assert lru.get("a") is None
    assert "a" not in lru and lru.size_bytes == 0
    assert lru.expirations == 1


def test_negative_budget_is_rejected() -> None:
    with pytest.raises(ValueError):
        MemoryLRU(-1)


@settings(deadline=None)
@given(
    max_bytes=st.integers(0, 5000),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "get", "delete"]),
            st.sampled_from("abcdefgh"),
            st.integers(0, 2000),
        ),
        max_size=60,
    ),
)
def test_size_accounting_stays_exact(max_bytes: int, ops: list[tuple[str, str, int]]) -> None:
    lru = MemoryLRU(max_bytes, clock=FakeClock())
    for op, key, payload_bytes in ops:
        if op == "put":
            lru.put(key, answer(payload_bytes))
        elif op == "get":
            lru.get(key)
        else:
            lru.delete(key)
        assert lru.size_bytes <= max_bytes
    stats = lru.stats()
    assert stats["entries"] == len(lru) and stats["size_bytes"] == lru.size_bytes
    for key in "abcdefgh":
        lru.delete(key)
    assert len(lru) == 0 and lru.size_bytes == 0  # accounting never drifts


def test_swap_replaces_only_the_entry_that_was_read() -> None:
    lru = MemoryLRU(10_000, clock=FakeClock())
    first, second, bigger = answer(10), answer(10), answer(500)
    lru.put("a", first)
    size_before = lru.size_bytes
    assert not lru.swap("a", second, bigger)  # "a" holds another object: left alone
    assert lru.get("a") is first and lru.size_bytes == size_before
    assert not lru.swap("missing", first, bigger)
    assert "missing" not in lru
    assert lru.swap("a", first, bigger)
    assert lru.get("a") is bigger and lru.size_bytes == size_before + 490
    tiny = MemoryLRU(300, clock=FakeClock())
    tiny.put("a", first)
    assert not tiny.swap("a", first, bigger)  # too big for the budget: the old one stays
    assert tiny.get("a") is first

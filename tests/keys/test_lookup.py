"""Unit tests for hasten.keys.lookup.ResolvedKeys (time passed in)."""

from __future__ import annotations

from hasten.keys.lookup import ResolvedKeys
from hasten.values.caller import Caller

ALICE = Caller("team-a", "vk_1")


def test_a_known_digest_is_fresh_for_ttl_then_asked_again() -> None:
    keys = ResolvedKeys(ttl_s=1.0)
    assert keys.fresh(b"d", 0.0) is None
    keys.remember(b"d", ALICE, 0.0)
    cached = keys.fresh(b"d", 0.99)
    assert cached is not None and cached.caller == ALICE
    assert keys.fresh(b"d", 1.0) is None
    assert keys.stale(b"d") == ALICE  # kept for an outage of the store


def test_an_unknown_digest_is_remembered_as_unknown() -> None:
    keys = ResolvedKeys(ttl_s=1.0)
    keys.remember(b"x", None, 0.0)
    cached = keys.fresh(b"x", 0.5)
    assert cached is not None and cached.caller is None
    assert keys.fresh(b"x", 1.5) is None
    assert keys.num_unknown == 0  # an expired unknown entry is dropped


def test_random_tokens_cannot_grow_memory() -> None:
    keys = ResolvedKeys(ttl_s=60.0, max_unknown=100)
    for i in range(10_000):
        keys.remember(i.to_bytes(32, "big"), None, 0.0)
    assert keys.num_unknown == 100
    assert keys.fresh((9_999).to_bytes(32, "big"), 1.0) is not None  # newest kept
    assert keys.fresh((0).to_bytes(32, "big"), 1.0) is None  # oldest evicted


def test_known_entries_are_bounded_least_recently_used_first() -> None:
    keys = ResolvedKeys(ttl_s=60.0, max_known=2)
    keys.remember(b"a", ALICE, 0.0)
    keys.remember(b"b", ALICE, 0.0)
    keys.fresh(b"a", 1.0)  # a is used: b is now the oldest
    keys.remember(b"c", ALICE, 0.0)
    assert keys.num_known == 2
    assert keys.stale(b"b") is None and keys.stale(b"a") == ALICE


def test_a_digest_that_became_unknown_is_no_longer_stale() -> None:
    keys = ResolvedKeys(ttl_s=1.0)
    keys.remember(b"d", ALICE, 0.0)
    keys.remember(b"d", None, 2.0)  # revoked meanwhile
    assert keys.stale(b"d") is None
    cached = keys.fresh(b"d", 2.5)
    assert cached is not None and cached.caller is None


def test_forget() -> None:
    keys = ResolvedKeys()
    keys.remember(b"a", ALICE, 0.0)
    keys.remember(b"b", None, 0.0)
    keys.forget(b"a")
    keys.forget(b"b")
    assert keys.fresh(b"a", 0.1) is None and keys.fresh(b"b", 0.1) is None
    assert keys.stale(b"a") is None

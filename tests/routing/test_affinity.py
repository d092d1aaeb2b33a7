"""Unit tests for hasten.routing.affinity: prefix keys, the hash ring, bounded load."""

from __future__ import annotations

import random
from collections import Counter

from hasten.routing.affinity import HashRing, bounded_capacity, choose_bounded, prefix_key


def _chat(system: str, user: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_prefix_key_ignores_the_last_turn_and_short_prefixes() -> None:
    system = "You are a careful assistant. " * 60
    one = prefix_key(_chat(system, "first"), min_chars=1024, max_chars=32_768)
    two = prefix_key(_chat(system, "second"), min_chars=1024, max_chars=32_768)
    other = prefix_key(_chat(system + "!", "first"), min_chars=1024, max_chars=32_768)
    assert one is not None and one == two and one != other
    assert prefix_key(_chat("short", "x"), min_chars=1024, max_chars=32_768) is None
    prompt = {"prompt": "p" * 2000}
    assert prefix_key(prompt, min_chars=1024, max_chars=4096) == prefix_key(
        {"prompt": "p" * 1500 + "q"}, min_chars=1024, max_chars=4096
    )


def test_ring_spreads_keys_and_moves_only_a_removed_nodes_keys() -> None:
    full = HashRing({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    without_d = HashRing({"a": 1.0, "b": 1.0, "c": 1.0})
    keys = [random.Random(i).getrandbits(64) for i in range(4000)]
    homes = Counter(next(full.walk(k)) for k in keys)
    assert min(homes.values()) > 600  # 1000 each on average
    for key in keys:
        home = next(full.walk(key))
        if home != "d":
            assert next(without_d.walk(key)) == home


def test_bounded_load_spills_to_the_next_node_on_the_ring() -> None:
    ring = HashRing({"a": 1.0, "b": 1.0, "c": 1.0})
    key = 12345
    home, second = list(ring.walk(key))[:2]
    assert choose_bounded(ring, key, {"a": 0, "b": 0, "c": 0}, 1.25) == home
    loads = {"a": 1, "b": 1, "c": 1}
    loads[home] = bounded_capacity(list(loads.values()), 1.25) + 1
    assert choose_bounded(ring, key, loads, 1.25) == second

"""Unit tests for hasten.routing.homes: homes balanced by keys, stable, bounded."""

from __future__ import annotations

import random
from collections import Counter

from hasten.routing.affinity import HashRing
from hasten.routing.homes import HomeTable, choose_home


def test_homes_are_balanced_by_number_of_keys() -> None:
    ring = HashRing({n: 1.0 for n in ("a", "b", "c", "d")})
    weights = dict.fromkeys(("a", "b", "c", "d"), 1.0)
    for trial in range(50):
        table = HomeTable(max_keys=1000)
        keys = [random.Random(trial * 100 + i).getrandbits(64) for i in range(16)]
        homes = Counter(table.place(k, list(ring.walk(k)), weights) for k in keys)
        assert sorted(homes.values()) == [4, 4, 4, 4]
        # A placed key keeps its home; most keys live where the ring puts them.
        assert all(table.place(k, list(ring.walk(k)), weights) == table.lookup(k) for k in keys)
        assert sum(table.lookup(k) == next(ring.walk(k)) for k in keys) >= 6


def test_home_table_is_bounded_and_frees_the_counts_it_forgets() -> None:
    table = HomeTable(max_keys=3)
    weights = {"a": 1.0, "b": 1.0}
    for key in range(5):
        table.place(key, ["a", "b"], weights)
    assert len(table) == 3 and table.lookup(0) is None and table.lookup(4) is not None
    assert table.num_keys("a") + table.num_keys("b") == 3


def test_heavier_deployments_are_home_to_more_keys() -> None:
    assert choose_home(["a", "b"], {"a": 1, "b": 0}, {"a": 3.0, "b": 1.0}, 1.0) == "a"
    assert choose_home(["a", "b"], {"a": 3, "b": 0}, {"a": 3.0, "b": 1.0}, 1.0) == "b"

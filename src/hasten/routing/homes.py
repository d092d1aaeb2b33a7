"""The home of each prefix key: balanced by number of keys, stable, bounded in memory.

Hashing alone balances keys only on average: 16 long system prompts over 4 deployments give
one of them 6 or more about half the time, more than its prompt cache may hold, while another
sits half idle. So a new key walks its consistent-hash candidates (``HashRing.walk``) and
settles on the first whose share of keys is under the bound ``ceil(key_load_factor *
(num_keys + 1) * weight / total_weight)``: with the default factor 1.0 homes differ by at most
one key (per unit of weight), and most keys still live where the ring puts them, so gateways
that saw keys in a different order mostly agree. The table remembers at most ``max_keys``
keys (least recently used are forgotten, and freed from their home's count).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence


class HomeTable:
    def __init__(self, *, max_keys: int, key_load_factor: float = 1.0) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.max_keys = max_keys
        self.key_load_factor = key_load_factor
        self._homes: OrderedDict[int, str] = OrderedDict()
        self._num_keys: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._homes)

    def num_keys(self, name: str) -> int:
        return self._num_keys.get(name, 0)

    def lookup(self, key: int) -> str | None:
        """The key's home, marking it recently used; None for a key not (or no longer) known."""
        home = self._homes.get(key)
        if home is not None:
            self._homes.move_to_end(key)
        return home

    def place(self, key: int, candidates: Sequence[str], weights: Mapping[str, float]) -> str:
        """Gives a new key its home: the first candidate under its share of keys.

        ``candidates`` is the key's ring order over the deployments that may be homes (the
        best priority tier); ``weights`` their weights. An already placed key keeps its home.
        """
        known = self.lookup(key)
        if known is not None and known in weights:
            return known
        if known is not None:
            self._forget(key)
        home = choose_home(candidates, self._num_keys, weights, self.key_load_factor)
        self._homes[key] = home
        self._num_keys[home] = self._num_keys.get(home, 0) + 1
        while len(self._homes) > self.max_keys:
            self._forget(next(iter(self._homes)))
        return home

    def _forget(self, key: int) -> None:
        home = self._homes.pop(key)
        self._num_keys[home] -= 1


def choose_home(
    candidates: Sequence[str],
    num_keys: Mapping[str, int],
    weights: Mapping[str, float],
    key_load_factor: float,
) -> str:
    """First candidate with fewer keys than its bound; the least loaded if none is under."""
    if not candidates:
        raise ValueError("a key needs at least one candidate home")
    total_keys = sum(num_keys.get(name, 0) for name in candidates) + 1
    total_weight = sum(weights[name] for name in candidates)
    for name in candidates:
        share = weights[name] / total_weight
        bound = max(1, math.ceil(key_load_factor * total_keys * share))
        if num_keys.get(name, 0) < bound:
            return name
    return min(candidates, key=lambda name: num_keys.get(name, 0) / weights[name])

"""The hedge budget: hedges may add at most ``ratio`` extra requests over a sliding window.

The window is a ring of per-second buckets, so old traffic ages out smoothly and a burst of
slow requests cannot turn into a burst of hedges that doubles the load on a struggling fleet.

With ``burst`` > 0 the budget is a token bucket instead: every request earns ``ratio`` of a
hedge, unspent credit is saved up to ``burst`` hedges (the bucket starts full), and a hedge
spends one. Hedges over any stretch of time are then at most ratio x requests + burst, and
the window only reports. Why: a sliding window has no room when the fleet needs hedges most,
at a cold start (no traffic in the window yet) and when a deployment degrades (every request
on it wants a hedge at once); on the routing benchmark in virtual time those refusals, not
the workload, set p99.9 (docs/benchmarks.md, "Two hedges: the p99.9 bound").
"""

from __future__ import annotations

import math

NUM_BUCKETS = 10


class HedgeBudget:
    def __init__(self, ratio: float, window_s: float, *, burst: float = 0.0) -> None:
        self.ratio = ratio
        self.burst = burst
        self._credit = burst  # token-bucket mode: the hedges it can pay for now
        self._bucket_s = window_s / NUM_BUCKETS
        self._epochs = [-1] * NUM_BUCKETS
        self._num_requests = [0] * NUM_BUCKETS
        self._num_hedges = [0] * NUM_BUCKETS
        self.num_denied = 0

    def _bucket(self, now_s: float) -> int:
        epoch = math.floor(now_s / self._bucket_s)
        index = epoch % NUM_BUCKETS
        if self._epochs[index] != epoch:
            self._epochs[index] = epoch
            self._num_requests[index] = 0
            self._num_hedges[index] = 0
        return index

    def _totals(self, now_s: float) -> tuple[int, int]:
        oldest = math.floor(now_s / self._bucket_s) - NUM_BUCKETS + 1
        num_requests = num_hedges = 0
        for index, epoch in enumerate(self._epochs):
            if epoch >= oldest:
                num_requests += self._num_requests[index]
                num_hedges += self._num_hedges[index]
        return num_requests, num_hedges

    def record_request(self, now_s: float) -> None:
        self._num_requests[self._bucket(now_s)] += 1
        if self.burst > 0:
            self._credit = min(self.burst, self._credit + self.ratio)

    def try_spend(self, now_s: float, *, max_fill: float = 1.0) -> bool:
        """Takes one hedge from the budget if there is room; records a denial otherwise.

        With ``max_fill`` below 1 the hedge may only use that share of the budget, leaving
        the rest to hedges that matter more (a second hedge leaves room for first ones).
        """
        if self.burst > 0:
            # A partial fill keeps a reserve of (1 - max_fill) x burst in the bucket.
            is_room = self._credit - 1.0 >= (1.0 - max_fill) * self.burst
        else:
            num_requests, num_hedges = self._totals(now_s)
            is_room = num_hedges + 1 <= max_fill * self.ratio * num_requests
        if not is_room:
            self.num_denied += 1
            return False
        if self.burst > 0:
            self._credit -= 1.0
        self._num_hedges[self._bucket(now_s)] += 1
        return True

    def remaining(self, now_s: float) -> float:
        """How many more hedges the window allows now (fractional: the budget's headroom)."""
        num_requests, num_hedges = self._totals(now_s)
        return max(0.0, self.ratio * num_requests - num_hedges)

    def snapshot(self, now_s: float) -> dict[str, object]:
        num_requests, num_hedges = self._totals(now_s)
        return {
            "ratio": self.ratio,
            "window_requests": num_requests,
            "window_hedges": num_hedges,
            "denied": self.num_denied,
            "burst": self.burst,
            "credit": round(self._credit, 3) if self.burst > 0 else None,
        }

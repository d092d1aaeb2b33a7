"""The hedge budget: hedges may add at most ``ratio`` extra requests over a sliding window.

The window is a ring of per-second buckets, so old traffic ages out smoothly and a burst of
slow requests cannot turn into a burst of hedges that doubles the load on a struggling fleet.
"""

from __future__ import annotations

import math

NUM_BUCKETS = 10


class HedgeBudget:
    def __init__(self, ratio: float, window_s: float) -> None:
        self.ratio = ratio
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

    def try_spend(self, now_s: float, *, max_fill: float = 1.0) -> bool:
        """Takes one hedge from the budget if there is room; records a denial otherwise.

        With ``max_fill`` below 1 the hedge may only use that share of the budget, leaving
        the rest to hedges that matter more (a second hedge leaves room for first ones).
        """
        num_requests, num_hedges = self._totals(now_s)
        if num_hedges + 1 > max_fill * self.ratio * num_requests:
            self.num_denied += 1
            return False
        self._num_hedges[self._bucket(now_s)] += 1
        return True

    def snapshot(self, now_s: float) -> dict[str, object]:
        num_requests, num_hedges = self._totals(now_s)
        return {
            "ratio": self.ratio,
            "window_requests": num_requests,
            "window_hedges": num_hedges,
            "denied": self.num_denied,
        }

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

The bucket alone lets a run spend its starting burst on top of the ratio (5% + 20 hedges over
2000 requests: up to 6%), so it also has a hard cap: hedges since the start are at most
max(burst, ratio x requests since the start). A budget of 5% then means at most 5% extra
requests over any run longer than burst / ratio requests, not 5% on average; within the
first burst / ratio requests, at most ``burst`` hedges. A hedge needs room under both.

Shared by a fleet of replicas (``apply_fleet``, fed by ``hasten.fleet.routing``), the window's
counts are the fleet's, as of the last sync, plus this replica's own since. Every replica
sees the same headroom between two syncs, so each may spend only its share of it (the
headroom over the number of replicas) plus what its own new requests earn: together they
cannot spend more than the fleet has. In token-bucket mode each replica keeps its own bucket,
earning from its own requests, but saves at most ``burst`` over the number of replicas (and
at least one hedge), so the fleet's burst is ``burst`` (or one hedge per replica); that share
is also the floor of its hard cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NUM_BUCKETS = 10


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """The fleet's window totals as of one sync (this replica's synced counts included)."""

    num_requests: int
    num_hedges: int
    num_replicas: int
    synced_s: float  # local time of the sync
    # A view older than this (or than one bucket, if longer) is not used: the syncs stopped.
    max_age_s: float = 0.0


class HedgeBudget:
    def __init__(self, ratio: float, window_s: float, *, burst: float = 0.0) -> None:
        self.ratio = ratio
        self.burst = burst
        self._credit = burst  # token-bucket mode: the hedges it can pay for now
        # Token-bucket mode's hard cap: requests and hedges since the start (this replica's).
        self.num_requests_total = 0
        self.num_hedges_total = 0
        self._bucket_s = window_s / NUM_BUCKETS
        self._epochs = [-1] * NUM_BUCKETS
        self._num_requests = [0] * NUM_BUCKETS
        self._num_hedges = [0] * NUM_BUCKETS
        self.num_denied = 0
        self._fleet: FleetCounts | None = None
        # Own counts not yet in the fleet's totals: since the last export (unsynced), and
        # exported but not yet confirmed by the sync that sent them (pending).
        self._num_unsynced = [0, 0]  # requests, hedges
        self._num_pending = [0, 0]

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
        self._num_unsynced[0] += 1
        self.num_requests_total += 1
        if self.burst > 0:
            self._credit = min(self._burst_cap(now_s), self._credit + self.ratio)

    def try_spend(self, now_s: float, *, max_fill: float = 1.0) -> bool:
        """Takes one hedge from the budget if there is room; records a denial otherwise.

        With ``max_fill`` below 1 the hedge may only use that share of the budget, leaving
        the rest to hedges that matter more (a second hedge leaves room for first ones).
        """
        fleet = self._fresh_fleet(now_s)
        if self.burst > 0:
            # A partial fill keeps a reserve of (1 - max_fill) x burst in the bucket.
            is_room = self.available(now_s) - 1.0 >= (1.0 - max_fill) * self._burst_cap(now_s)
        elif fleet is not None:
            is_room = self._is_fleet_room(fleet, max_fill)
        else:
            num_requests, num_hedges = self._totals(now_s)
            is_room = num_hedges + 1 <= max_fill * self.ratio * num_requests
        if not is_room:
            self.num_denied += 1
            return False
        if self.burst > 0:
            self._credit -= 1.0
        self.num_hedges_total += 1
        self._num_hedges[self._bucket(now_s)] += 1
        self._num_unsynced[1] += 1
        return True

    def available(self, now_s: float) -> float:
        """Token-bucket mode: the hedges it can pay for now, the bucket's credit within the
        hard cap max(burst, ratio x requests since the start) less the hedges since the start.
        Sliding-window mode: the window's headroom (``remaining``)."""
        if self.burst <= 0:
            return self.remaining(now_s)
        cap = max(self._burst_cap(now_s), self.ratio * self.num_requests_total)
        return min(self._credit, cap - self.num_hedges_total)

    def _is_fleet_room(self, fleet: FleetCounts, max_fill: float) -> bool:
        return self._fleet_allowance(fleet, max_fill) >= 1.0

    def _fleet_allowance(self, fleet: FleetCounts, max_fill: float) -> float:
        """What this replica may still spend: its share of the headroom at the last sync
        plus what its own requests since have earned, less its own hedges since."""
        allowed = max_fill * self.ratio
        num_own_requests = self._num_unsynced[0] + self._num_pending[0]
        num_own_hedges = self._num_unsynced[1] + self._num_pending[1]
        headroom = allowed * fleet.num_requests - fleet.num_hedges  # negative: overspent
        share = headroom / max(1, fleet.num_replicas)
        return share + allowed * num_own_requests - num_own_hedges

    def _fresh_fleet(self, now_s: float) -> FleetCounts | None:
        fleet = self._fleet
        if fleet is None or now_s - fleet.synced_s > max(self._bucket_s, fleet.max_age_s):
            return None
        return fleet

    def _burst_cap(self, now_s: float) -> float:
        fleet = self._fresh_fleet(now_s)
        if fleet is None:
            return self.burst
        return max(1.0, self.burst / max(1, fleet.num_replicas))

    # --- sharing with the fleet (hasten.fleet.routing) ------------------------------------

    def take_counts(self) -> tuple[int, int]:
        """Own requests and hedges since the last call, to add to the fleet's totals; they
        stay counted here as pending until ``apply_fleet``."""
        self._num_pending[0] += self._num_unsynced[0]
        self._num_pending[1] += self._num_unsynced[1]
        self._num_unsynced = [0, 0]
        return self._num_pending[0], self._num_pending[1]

    def apply_fleet(self, counts: FleetCounts | None) -> None:
        """The fleet's totals, which now include the pending counts; None: Redis is away (or
        the sync failed), decide from this replica's own window, which has every count."""
        self._fleet = counts
        self._num_pending = [0, 0]
        if counts is None:
            self._num_unsynced = [0, 0]  # the local window counts them already

    def remaining(self, now_s: float) -> float:
        """How many more hedges the window allows now (fractional: the budget's headroom);
        shared by a fleet, this replica's part of it (its share plus its own earnings)."""
        fleet = self._fresh_fleet(now_s)
        if self.burst > 0:
            return max(0.0, self.available(now_s))
        if fleet is not None:
            return max(0.0, self._fleet_allowance(fleet, 1.0))
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
            "available": round(self.available(now_s), 3) if self.burst > 0 else None,
            "requests_total": self.num_requests_total,
            "hedges_total": self.num_hedges_total,
            "fleet": None if self._fleet is None else self._fleet_snapshot(self._fleet),
        }

    def _fleet_snapshot(self, fleet: FleetCounts) -> dict[str, object]:
        return {
            "window_requests": fleet.num_requests,
            "window_hedges": fleet.num_hedges,
            "replicas": fleet.num_replicas,
            "unsynced_requests": self._num_unsynced[0] + self._num_pending[0],
            "unsynced_hedges": self._num_unsynced[1] + self._num_pending[1],
        }

"""One model's deployments: where the next request goes, and what past requests taught us.

``rank`` orders the deployments for one request. The first is the primary; the rest are,
in order, the hedge target and the failover candidates:
1. deployments whose breaker admits traffic and which are under ``max_concurrency``;
   of those only the best (lowest) priority tier competes for primary;
2. within the tier, a request with a prefix-affinity key takes its key's home (a table that
   keeps homes balanced by number of keys, see ``homes``) unless the home holds more than
   ``affinity_load_factor`` x the average in flight, then the next on the key's ring;
   any other request power-of-two-choices: two deployments drawn by weight, the lower cost
   wins, cost = expected latency x (1 + 0.25 x in flight) / weight; an avoided (much
   slower) deployment is drawn only when due for exploration, see ``exploration``;
3. then the rest of the tier and lower tiers, by cost;
4. then deployments that are tripped or full, least bad first, so that when everything is
   tripped the request is still tried somewhere rather than refused.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.routing.affinity import HashRing, bounded_capacity, choose_bounded
from hasten.routing.budget import HedgeBudget
from hasten.routing.deployment import Deployment
from hasten.routing.estimates import healthy_pooled, nearest_rank
from hasten.routing.exploration import fastest_typical_ms, is_avoided, may_explore
from hasten.routing.hedge_delay import RESERVE_SHARE, first_hedge_delay_ms, scarcity
from hasten.routing.homes import HomeTable
from hasten.routing.outbox import ObservationKind, Outbox, Summary, Trip

MAX_EXPECTED_TOKENS = 4096
# Hedging at the TTFT quantile the budget can afford: with a 5% budget, p96, so that
# hedges wanted stay under the budget and none is refused to a real straggler.
BUDGET_FILL = 0.8
# A second hedge may use the budget only up to this share of it: the delay was sized for
# first hedges (BUDGET_FILL), so second ones take slack and never crowd a first one out. At a
# shorter gap than the default they pay off less, too: fired when the first hedge is merely in
# its body's upper tail (p80 after it, say), one in seven rescues anything.
SECOND_HEDGE_FILL = 0.9


@dataclass(frozen=True, slots=True)
class Ranking:
    order: tuple[str, ...]
    reason: str  # how the primary was chosen: only, p2c, affinity, affinity_spill, priority,
    # least_bad


class DeploymentPool:
    def __init__(
        self,
        deployments: Sequence[DeploymentConfig],
        routing: RoutingConfig,
        rng: random.Random,
    ) -> None:
        if not deployments:
            raise ValueError("a pool needs at least one deployment")
        self.routing = routing
        self.deployments = {d.upstream: Deployment(d, routing) for d in deployments}
        self._rng = rng
        hedge = routing.hedge
        self.budget = HedgeBudget(hedge.budget, hedge.budget_window_s, burst=hedge.budget_burst)
        self._ring = HashRing({d.upstream: d.weight for d in deployments})
        self._homes = HomeTable(
            max_keys=routing.affinity_max_keys, key_load_factor=routing.affinity_key_load_factor
        )
        self.num_requests = 0
        self.num_hedges = 0  # of every level
        self.num_second_hedges = 0
        self.outbox: Outbox | None = None  # set while the fleet shares routing state
        self.num_remote_observations = 0
        # Counts what this pool learns (samples, failures, probes, attempts): a reader that
        # keeps figures derived from the estimates (hasten.metrics.saved) knows when they moved.
        self.version = 0
        # The pooled samples the hedge delays rank, sorted, and what they were sorted from.
        self._pooled_key: tuple[tuple[int, float | None], ...] | None = None
        self._pooled: list[float] = []

    # --- deciding ---------------------------------------------------------------------

    def rank(
        self, now_s: float, *, affinity_key: int | None = None, expected_tokens: int = 0
    ) -> Ranking:
        deployments = list(self.deployments.values())
        if len(deployments) == 1:
            return Ranking((deployments[0].name,), "only")
        expected_tokens = min(max(0, expected_tokens), MAX_EXPECTED_TOKENS)
        fleet_ms = self._fleet_ttft_ms(now_s)
        explore_decay_s = self.routing.explore_decay_s

        def cost(d: Deployment) -> float:
            return d.cost(d.expected_ttft_ms(now_s, fleet_ms, explore_decay_s), expected_tokens)

        eligible = [d for d in deployments if d.is_eligible(now_s)]
        blocked = sorted(
            (d for d in deployments if not d.is_eligible(now_s)),
            key=lambda d: (d.breaker.badness(now_s), d.config.priority, cost(d)),
        )
        if not eligible:
            return Ranking(tuple(d.name for d in blocked), "least_bad")
        best_priority = min(d.config.priority for d in eligible)
        tier = [d for d in eligible if d.config.priority == best_priority]
        primary, reason = self._primary(tier, now_s, affinity_key, cost)
        if best_priority > min(d.config.priority for d in deployments):
            reason = "priority"  # the better tier is tripped or full: a backup answers

        def learnt_cost(d: Deployment) -> float:
            return d.cost(d.expected_ttft_ms(now_s, fleet_ms, math.inf), expected_tokens)

        # Hedges and failovers rescue a late request: they go where the evidence says fast,
        # not where an avoided deployment's estimate has merely drifted back (exploration is
        # for the primary, whose cost is one ordinary request).
        rest = sorted(
            (d for d in eligible if d is not primary),
            key=lambda d: (d.config.priority, learnt_cost(d)),
        )
        if reason.startswith("affinity") and affinity_key is not None:
            # Failover and hedges follow the ring too, so a key's second home stays warm.
            ring_rank = {name: i for i, name in enumerate(self._ring.walk(affinity_key))}
            rest.sort(key=lambda d: (d.config.priority, ring_rank[d.name]))
        order = (primary, *rest, *blocked)
        return Ranking(tuple(d.name for d in order), reason)

    def _explorable(
        self, tier: list[Deployment], now_s: float, fastest_ms: float
    ) -> list[Deployment]:
        """The tier less the avoided deployments not due for exploration (see ``exploration``)."""
        interval_s = self.routing.explore_decay_s
        kept = [
            d
            for d in tier
            if not is_avoided(d.estimate, fastest_ms)
            or may_explore(now_s, d.explored_s, d.num_in_flight, interval_s)
        ]
        return kept or tier

    def _primary(
        self,
        tier: list[Deployment],
        now_s: float,
        affinity_key: int | None,
        cost: Callable[[Deployment], float],
    ) -> tuple[Deployment, str]:
        if len(tier) == 1:
            return tier[0], "only"
        if affinity_key is not None and self.routing.is_affinity_enabled:
            placed = self._affinity_primary(tier, affinity_key)
            if placed is not None:
                return placed
        # Affinity above ignores the exploration gate: a prefix-caching home looks slow after
        # a few cold prompts, and moving its keys away would only make more of them cold.
        fastest_ms = fastest_typical_ms(d.estimate for d in self.deployments.values())
        candidates = self._explorable(tier, now_s, fastest_ms)
        if len(candidates) == 1:
            chosen = candidates[0]
        else:
            first, second = self._draw_two(candidates)
            chosen = first if cost(first) <= cost(second) else second
        if is_avoided(chosen.estimate, fastest_ms):
            chosen.explored_s = now_s
        return chosen, "p2c"

    def _draw_two(self, tier: list[Deployment]) -> tuple[Deployment, Deployment]:
        """Two distinct deployments, each drawn with probability proportional to its weight."""
        weights = [d.config.weight for d in tier]
        first_index = self._rng.choices(range(len(tier)), weights=weights)[0]
        weights[first_index] = 0.0
        second_index = self._rng.choices(range(len(tier)), weights=weights)[0]
        return tier[first_index], tier[second_index]

    def _affinity_primary(
        self, tier: list[Deployment], affinity_key: int
    ) -> tuple[Deployment, str] | None:
        """The key's home when it is up and not overloaded, else the next on its ring."""
        best_priority = min(d.config.priority for d in self.deployments.values())
        homes = {
            d.name: d.config.weight
            for d in self.deployments.values()
            if d.config.priority == best_priority
        }
        candidates = [name for name in self._ring.walk(affinity_key) if name in homes]
        home = self._homes.place(affinity_key, candidates, homes)
        loads = {d.name: d.num_in_flight for d in tier}
        capacity = bounded_capacity(list(loads.values()), self.routing.affinity_load_factor)
        if loads.get(home, capacity) < capacity:
            return self.deployments[home], "affinity"
        name = choose_bounded(self._ring, affinity_key, loads, self.routing.affinity_load_factor)
        return None if name is None else (self.deployments[name], "affinity_spill")

    def _fleet_ttft_ms(self, now_s: float) -> float:
        """What an unmeasured deployment is assumed to cost, and where an unsampled one drifts
        back to: the best measured estimate, so new or avoided deployments get (re)tried."""
        known = [
            t for d in self.deployments.values() if (t := d.estimate.ttft_ms(now_s)) is not None
        ]
        return min(known) if known else 1.0

    def hedge_quantile(self) -> float:
        hedge = self.routing.hedge
        return max(hedge.quantile, 1.0 - BUDGET_FILL * hedge.budget)

    def hedge_delay_s(self, name: str, now_s: float | None = None) -> float:
        """Adaptive: the TTFT quantile the budget affords, clamped to [min, max] delay.

        The quantile is over the pooled samples of the well-measured deployments about as
        fast as the fastest (``healthy_pooled``): the hedge goes elsewhere, so a degraded
        (or new) deployment's own slow or unknown p96 must not postpone it. Before
        any deployment has ``min_samples``, the fleet's samples pooled are the prior: with
        few of them the nearest rank is their maximum, a conservative delay, but a far
        earlier one than ``max_delay_ms`` for a cold start. Never later than twice the pooled
        median, and, given ``now_s``, postponed while a token bucket runs short (see
        ``hedge_delay``); without it, the delay a full budget would use (what sorts a
        cancelled attempt's bound into the tail or not).
        """
        del name  # every deployment is hedged on the fleet's clock
        pooled = self._pooled_samples()
        hedge = self.routing.hedge
        if pooled is None:
            return hedge.max_delay_ms / 1000.0
        shortage = 0.0
        if now_s is not None and self.budget.burst > 0:
            reserve = RESERVE_SHARE * self.budget.burst
            shortage = scarcity(self.budget.available(now_s), reserve)
        delay_ms = first_hedge_delay_ms(
            nearest_rank(pooled, self.hedge_quantile()), nearest_rank(pooled, 0.5), shortage
        )
        return self._clamped_s(delay_ms)

    def second_hedge_gap_s(self) -> float:
        """How long after the first hedge the second fires (``max_hedges = 2``): the pooled
        TTFT quantile ``second_quantile`` (by default the first hedge's), clamped like the
        first delay. The first hedge is a fresh draw from that distribution, so past this it
        is late too, and the primary, older still, is almost surely a straggler."""
        quantile = self.routing.hedge.second_quantile
        pooled = self._pooled_samples()
        if pooled is None:
            return self.routing.hedge.max_delay_ms / 1000.0
        return self._clamped_s(
            nearest_rank(pooled, self.hedge_quantile() if quantile is None else quantile)
        )

    def hedge_retry_s(self) -> float | None:
        """How long a hedge the budget refused waits before it asks again: the pooled median
        TTFT (clamped like the delays), a typical request's time, over which the requests
        that arrive earn the budget more. Refused once and for all, a straggler's hedge left
        it at its full TTFT (15 s for a straggler on a degraded deployment, in virtual time).
        None (refused for good) with the sliding window, which makes room only as old traffic
        ages out: there a hedge asked for again takes the room of newer requests' first
        hedges (hedge_virtual.py, 30 seeds: p99 947 ms against 865 without)."""
        if self.budget.burst <= 0:
            return None
        pooled = self._pooled_samples()
        if pooled is None:
            return self.routing.hedge.max_delay_ms / 1000.0
        return self._clamped_s(nearest_rank(pooled, 0.5))

    def _clamped_s(self, delay_ms: float) -> float:
        hedge = self.routing.hedge
        return min(hedge.max_delay_ms, max(hedge.min_delay_ms, delay_ms)) / 1000.0

    def _pooled_samples(self) -> list[float] | None:
        """The sorted TTFT samples the delays rank (see ``hedge_delay_s``); None: too few yet.
        Sorted again only when a sample or a typical value changed since the last call."""
        estimates = [d.estimate for d in self.deployments.values()]
        key = tuple((e.num_samples, e.typical_ttft_ms) for e in estimates)
        if key == self._pooled_key:
            return self._pooled or None
        min_samples = self.routing.hedge.min_samples
        measured = [
            (e.typical_ttft_ms or 0.0, e.recent_samples())
            for e in estimates
            if e.num_samples >= max(1, min_samples)
        ]
        if measured:
            pooled = healthy_pooled(measured)
        else:
            pooled = []
            for estimate in estimates:
                pooled.extend(estimate.recent_samples())
            pooled.sort()
            if len(pooled) < min_samples:
                pooled = []
        self._pooled_key, self._pooled = key, pooled
        return pooled or None

    def hedge_target(
        self, order: Sequence[str], num_tries: Mapping[str, int], now_s: float, *, level: int = 1
    ) -> str | None:
        """Where a hedge goes, decided when it fires (the ranking is as old as the request).

        The first hedge: the first eligible deployment in ``order`` this request has not
        tried, preferring one not avoided (much slower than the fastest: it would answer
        too late to help, and a loaded healthy peer can outrank it by cost at the start).
        The second: of the eligible deployments not avoided, the one this request was sent
        to least, ties in ranking order; so a third deployment when there is one, else a
        fresh attempt on the primary's (a straggler is one request's bad luck: a deployment
        slow as a whole would be avoided). None: nowhere worth hedging to.
        """
        fastest_ms = fastest_typical_ms(d.estimate for d in self.deployments.values())
        eligible = [name for name in order if self.deployments[name].is_eligible(now_s)]
        healthy = [n for n in eligible if not is_avoided(self.deployments[n].estimate, fastest_ms)]
        if level == 1:
            untried = [name for name in eligible if num_tries.get(name, 0) == 0]
            preferred = [name for name in untried if name in healthy] or untried
            return preferred[0] if preferred else None
        if not healthy:
            return None
        return min(healthy, key=lambda name: num_tries.get(name, 0))

    def ttft_timeout_s(self, name: str) -> float | None:
        own = self.deployments[name].config.ttft_timeout_s
        return own if own is not None else self.routing.ttft_timeout_s

    def try_hedge(self, now_s: float, *, level: int = 1) -> bool:
        """Permission for a hedge (``level`` 2: the second of a request) from the budget,
        which counts both levels against the same ratio."""
        max_fill = 1.0 if level == 1 else SECOND_HEDGE_FILL
        if not self.budget.try_spend(now_s, max_fill=max_fill):
            return False
        self.num_hedges += 1
        if level > 1:
            self.num_second_hedges += 1
        return True

    # --- learning ---------------------------------------------------------------------

    def on_request(self, now_s: float) -> None:
        self.num_requests += 1
        self.budget.record_request(now_s)

    def on_attempt_start(self, name: str, now_s: float) -> bool:
        """Counts an attempt in flight; True if it is a half-open breaker probe."""
        self.version += 1
        deployment = self.deployments[name]
        deployment.num_in_flight += 1
        deployment.waiting_since_s.append(now_s)
        deployment.num_attempts += 1
        return deployment.breaker.on_attempt(now_s)

    def on_attempt_end(self, name: str) -> None:
        deployment = self.deployments[name]
        deployment.num_in_flight = max(0, deployment.num_in_flight - 1)

    def on_first_token(
        self,
        name: str,
        ttft_ms: float,
        now_s: float,
        *,
        is_probe: bool,
        started_s: float | None = None,
    ) -> None:
        self.version += 1
        deployment = self.deployments[name]
        deployment.stop_waiting(started_s)
        deployment.num_wins += 1
        deployment.estimate.observe_ttft(ttft_ms, now_s)
        deployment.breaker.record_success(now_s, is_probe=is_probe)
        if self.outbox is not None:
            self.outbox.observe(name, ObservationKind.TTFT, ttft_ms, now_s)

    def on_final_status(
        self, name: str, now_s: float, *, is_probe: bool, started_s: float | None = None
    ) -> None:
        """A final non-2xx answer (a 400, say): alive and well, latency not comparable."""
        self.version += 1
        deployment = self.deployments[name]
        deployment.stop_waiting(started_s)
        deployment.breaker.record_success(now_s, is_probe=is_probe)

    def on_failure(
        self,
        name: str,
        now_s: float,
        *,
        is_probe: bool,
        reason: str,
        elapsed_ms: float | None = None,
        retry_after_s: float | None = None,
        started_s: float | None = None,
    ) -> None:
        self.version += 1
        deployment = self.deployments[name]
        deployment.stop_waiting(started_s)
        deployment.num_failures += 1
        if elapsed_ms is not None:
            self._observe_censored(deployment, elapsed_ms, now_s)
            if self.outbox is not None:
                self.outbox.observe(name, ObservationKind.CENSORED, elapsed_ms, now_s)
        self._record_failure(
            deployment, now_s, is_probe=is_probe, reason=reason, retry_after_s=retry_after_s
        )

    def _record_failure(
        self,
        deployment: Deployment,
        now_s: float,
        *,
        is_probe: bool,
        reason: str,
        retry_after_s: float | None = None,
    ) -> None:
        breaker = deployment.breaker
        num_trips = breaker.num_trips_total
        breaker.record_failure(now_s, is_probe=is_probe, reason=reason, retry_after_s=retry_after_s)
        if self.outbox is not None and breaker.num_trips_total != num_trips:
            trip = Trip(
                deployment.name, breaker.reopen_at_s, breaker.num_trips, breaker.last_trip_reason
            )
            self.outbox.trip(trip)

    def on_busy(self, name: str, *, is_probe: bool, started_s: float | None = None) -> None:
        """An attempt its upstream's in-flight cap refused before sending: no failure for
        the breaker, no latency for the estimates (the upstream never saw it)."""
        self.version += 1
        deployment = self.deployments[name]
        deployment.stop_waiting(started_s)
        deployment.num_busy += 1
        deployment.breaker.release_probe(is_probe)

    def on_cancelled(
        self,
        name: str,
        elapsed_ms: float,
        now_s: float,
        *,
        is_probe: bool,
        started_s: float | None = None,
    ) -> None:
        """A hedge loser: neither success nor failure, but its TTFT was at least this."""
        self.version += 1
        deployment = self.deployments[name]
        deployment.stop_waiting(started_s)
        deployment.num_cancelled += 1
        self._observe_censored(deployment, elapsed_ms, now_s)
        deployment.breaker.release_probe(is_probe)
        if self.outbox is not None:
            self.outbox.observe(name, ObservationKind.CENSORED, elapsed_ms, now_s)

    def _observe_censored(self, deployment: Deployment, elapsed_ms: float, now_s: float) -> None:
        # A primary abandoned after the hedge delay was a straggler: it must stay in the
        # quantile window as "at least this slow", or hedged stragglers would vanish from it
        # and the delay would creep down. A hedge cancelled early says nothing of the tail.
        is_tail = elapsed_ms >= self.hedge_delay_s(deployment.name) * 1000.0
        deployment.estimate.observe_censored(elapsed_ms, now_s, is_tail=is_tail)

    def on_stream_end(self, name: str, now_s: float, *, tpot_ms: float | None, error: str) -> None:
        self.version += 1
        deployment = self.deployments[name]
        if tpot_ms is not None:
            deployment.estimate.observe_tpot(tpot_ms)
            if self.outbox is not None:
                self.outbox.observe(name, ObservationKind.TPOT, tpot_ms, now_s)
        if error:
            deployment.num_failures += 1
            self._record_failure(deployment, now_s, is_probe=False, reason=error)

    def on_probe(self, name: str, now_s: float, rtt_ms: float | None, error: str) -> None:
        self.version += 1
        deployment = self.deployments[name]
        if rtt_ms is not None:
            deployment.estimate.observe_probe(rtt_ms)
        if error:
            self._record_failure(deployment, now_s, is_probe=False, reason=f"probe: {error}")

    def merge_remote(self, summary: Summary, now_s: float) -> int:
        """Folds another replica's news in, as if this replica had seen it (never exported
        again: only this pool's own hooks fill its outbox); returns how many breakers it
        opened. Deployments this pool does not have are skipped."""
        tail_ms: float | None = None
        self.version += 1
        for observation in summary.observations:
            deployment = self.deployments.get(observation.deployment)
            if deployment is None:
                continue
            at_s = min(now_s, observation.at_s)  # never in this replica's future
            self.num_remote_observations += 1
            estimate, value_ms = deployment.estimate, observation.value_ms
            if observation.kind is ObservationKind.TTFT:
                estimate.observe_ttft(value_ms, at_s)
            elif observation.kind is ObservationKind.CENSORED:
                if tail_ms is None:  # once per batch: the delay sorts the pooled samples
                    tail_ms = self.hedge_delay_s(deployment.name) * 1000.0
                estimate.observe_censored(value_ms, at_s, is_tail=value_ms >= tail_ms)
            else:
                estimate.observe_tpot(value_ms)
        num_opened = 0
        for trip in summary.trips:
            deployment = self.deployments.get(trip.deployment)
            if deployment is not None and deployment.breaker.apply_remote_trip(
                trip.reopen_at_s, trip.num_trips, trip.reason, now_s
            ):
                num_opened += 1
        return num_opened

    def snapshot(self, now_s: float) -> dict[str, object]:
        hedge = self.routing.hedge
        return {
            "requests": self.num_requests,
            "hedges": self.num_hedges,
            "second_hedges": self.num_second_hedges,
            "hedging": hedge.is_enabled,
            "hedge_budget": self.budget.snapshot(now_s),
            "hedge_quantile": self.hedge_quantile(),
            "hedge_delay_ms": {
                name: round(self.hedge_delay_s(name, now_s) * 1000.0, 2)
                for name in self.deployments
            },
            "max_hedges": hedge.max_hedges,
            "second_hedge_gap_ms": round(self.second_hedge_gap_s() * 1000.0, 2),
            "affinity": self.routing.is_affinity_enabled,
            "deployments": {n: d.snapshot(now_s) for n, d in self.deployments.items()},
        }

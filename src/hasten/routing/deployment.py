"""The live state of one deployment: its estimates, breaker, in-flight count and counters.

``Deployment`` answers what one deployment would cost a request now; choosing among them
is the pool's job (see ``pool``).
"""

from __future__ import annotations

import math

from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.routing.breaker import CircuitBreaker
from hasten.routing.estimates import LatencyEstimate

# LLM servers batch: one more request in flight slows each a little, not by a whole request
# time as in a single queue, so in-flight counts add 25% each rather than multiply.
LOAD_PENALTY_PER_REQUEST = 0.25


class Deployment:
    """Live state of one deployment: estimates, breaker, in-flight count, counters."""

    def __init__(self, config: DeploymentConfig, routing: RoutingConfig) -> None:
        self.config = config
        self.name = config.upstream
        self.estimate = LatencyEstimate(
            ewma_decay_s=routing.ewma_decay_s, penalty_decay_s=routing.penalty_decay_s
        )
        self.breaker = CircuitBreaker(routing.breaker)
        self.num_in_flight = 0
        self.waiting_since_s: list[float] = []  # attempts still waiting for a first token
        self.num_attempts = 0
        self.num_wins = 0
        self.num_failures = 0
        self.num_cancelled = 0
        self.num_busy = 0  # attempts refused by the upstream's in-flight cap (never sent)
        self.explored_s: float | None = None  # when an avoided self last got a request

    def is_eligible(self, now_s: float) -> bool:
        limit = self.config.max_concurrency
        is_full = limit > 0 and self.num_in_flight >= limit
        return not is_full and self.breaker.is_available(now_s)

    def stop_waiting(self, started_s: float | None) -> None:
        waiting = self.waiting_since_s
        if started_s is not None and started_s in waiting:
            waiting.remove(started_s)
        elif waiting:
            waiting.pop(0)

    def waiting_ms(self, now_s: float) -> list[float]:
        return [(now_s - started_s) * 1000.0 for started_s in self.waiting_since_s]

    def expected_ttft_ms(self, now_s: float, fleet_ms: float, explore_decay_s: float) -> float:
        """The TTFT estimate, drifting back to the fleet's (``fleet_ms``) while unsampled.

        Requests waiting right now are current evidence and do not drift: two of them
        waiting longer than the estimate already outweigh it.
        """
        estimate = self.estimate
        learnt_ms = estimate.ttft_ms(now_s)
        if learnt_ms is None:
            learnt_ms = fleet_ms
        elif learnt_ms > fleet_ms and estimate.updated_s is not None:
            idle_s = max(0.0, now_s - estimate.updated_s)
            learnt_ms = fleet_ms + (learnt_ms - fleet_ms) * math.exp(-idle_s / explore_decay_s)
        return max(learnt_ms, estimate.slowness_ms(now_s, self.waiting_ms(now_s)))

    def cost(self, ttft_ms: float, expected_tokens: int) -> float:
        latency_ms = ttft_ms + (self.estimate.tpot_ms or 0.0) * expected_tokens
        load = 1.0 + LOAD_PENALTY_PER_REQUEST * self.num_in_flight
        return max(latency_ms, 1.0) * load / self.config.weight

    def snapshot(self, now_s: float) -> dict[str, object]:
        estimate = self.estimate
        ttft_ms = estimate.ttft_ms(now_s, self.waiting_ms(now_s))
        typical_ms = estimate.typical_ttft_ms
        return {
            "weight": self.config.weight,
            "priority": self.config.priority,
            "max_concurrency": self.config.max_concurrency,
            "in_flight": self.num_in_flight,
            "waiting_for_first_token": len(self.waiting_since_s),
            "ttft_ms": None if ttft_ms is None else round(ttft_ms, 2),
            "ttft_typical_ms": None if typical_ms is None else round(typical_ms, 2),
            "ttft_slowness_ms": round(estimate.slowness_ms(now_s, self.waiting_ms(now_s)), 2),
            "ttft_p95_ms": estimate.quantile_ms(0.95),
            "tpot_ms": None if estimate.tpot_ms is None else round(estimate.tpot_ms, 3),
            "probe_rtt_ms": estimate.probe_rtt_ms,
            "samples": estimate.num_samples,
            "attempts": self.num_attempts,
            "wins": self.num_wins,
            "failures": self.num_failures,
            "cancelled": self.num_cancelled,
            "busy": self.num_busy,
            "breaker": self.breaker.snapshot(now_s),
        }

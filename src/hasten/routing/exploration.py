"""Exploration of avoided deployments: rare, one request at a time.

An avoided deployment (its learnt TTFT well above the fleet's best) drifts back to the
fleet's estimate over ``explore_decay_s`` so that a recovery gets noticed. Left to cost
alone, that drift sends it a stream of real requests once it is competitive with the loaded
healthy deployments, and with hedging each of them outwaits the hedge delay: measured on the
routing benchmark, a degraded deployment took 2-3% of the requests of the second half, every
one of them spending a hedge, so the 5% budget no longer covered the stragglers and p99 went
from ~0.8 s to ~1.7 s. With hedging its learnt TTFT is also too low (its tries are hedged away
at the delay, a lower bound), so cost alone keeps it competitive. Hence a gate, by count:
an avoided deployment competes for primary only when it has nothing in flight and was not
explored within the last interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hasten.routing.estimates import LatencyEstimate

# "Avoided": typical TTFT and the median of the last few samples both above this factor
# times the fleet's best estimate.
AVOIDED_FACTOR = 1.5


def is_slow(typical_ttft_ms: float, recent_median_ms: float, fastest_typical_ms: float) -> bool:
    """Slow by its typical value and by most recent samples: one straggler can lift the
    typical value of a little-used deployment a long way, but not the median, and a gate
    that shut a healthy deployment out for an interval on one straggler would starve it."""
    limit_ms = AVOIDED_FACTOR * fastest_typical_ms
    return typical_ttft_ms > limit_ms and recent_median_ms > limit_ms


def is_avoided(estimate: LatencyEstimate, fastest_typical_ms: float) -> bool:
    typical_ms = estimate.typical_ttft_ms
    return typical_ms is not None and is_slow(
        typical_ms, estimate.recent_median_ms, fastest_typical_ms
    )


def fastest_typical_ms(estimates: Iterable[LatencyEstimate]) -> float:
    """The reference for "avoided": typical values only, since the estimates used for cost
    also carry the waiting of requests in flight, which under load lifts them all."""
    typical = [t for e in estimates if (t := e.typical_ttft_ms) is not None]
    return min(typical) if typical else math.inf


def may_explore(
    now_s: float, explored_s: float | None, num_in_flight: int, interval_s: float
) -> bool:
    """Whether an avoided deployment may compete for primary now: one request at a time, at
    most one per ``interval_s``."""
    if num_in_flight > 0:
        return False
    return explored_s is None or now_s - explored_s >= interval_s

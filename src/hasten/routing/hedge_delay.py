"""When a first hedge fires: the TTFT quantile the budget affords, bounded by the median, and
postponed while the budget runs short. Pure: the pool passes in what it measured.

1. The budget's quantile (p96 of the pooled TTFTs for a 5% budget), but never later than
   ``LATE_MEDIAN_FACTOR`` x the pooled median. With a few percent of stragglers far out (10x,
   say), the quantile sits at the edge of the healthy body, and when a window happens to hold
   more stragglers than the budget's share it jumps out to them (to ``max_delay_ms``), where
   hedging saves nothing (every straggler outwaits that delay too) and rescues each one a
   second later. In virtual time on the routing benchmark's workload that jump, not the
   budget, set p99 in some seeds (a window of two deployments after the third degraded holding
   4-6% of tail samples: the delay went from ~480 to 1000 ms for hundreds of requests). A
   first token twice as late as the median one is late by any reading of a TTFT distribution
   that LLM servers produce, so the bound costs a fleet without such a tail nothing.
2. Scarcity: when the budget (token-bucket mode, with its hard cap) has less than a reserve
   of ``RESERVE_SHARE`` x its burst left, the delay moves further out, up to
   ``POSTPONE_SPREAD`` x (delay - median) later when it is empty. A hedge refused by the
   budget leaves a straggler at its full TTFT (~10x), while a hedge that waits a little longer
   goes, far more often, to a request that really is a straggler: the healthy body thins out
   fast past the quantile (a log-normal's p96 -> p99.9 is ~1.3x here), so waiting spends
   the last hedges on the requests that need them and lets the budget refill.
"""

from __future__ import annotations

# A first token this many times the pooled median is late, whatever the quantile says.
LATE_MEDIAN_FACTOR = 2.0
# Token-bucket mode: first hedges are postponed while fewer than this share of the burst
# (3 of 20 hedges) is left... Measured in virtual time (hedge_virtual.py, 60 seeds, routing
# benchmark's workload; seeds at p99 >= 3.97x / p99.9 >= 4x / both within 5%): none 17/9/2,
# 0.1 16/15/6, 0.15 17/18/6, 0.25 12/22/6 (later hedges cost p99).
RESERVE_SHARE = 0.15
# ...by up to this share of the distance from the median to the delay (empty budget).
POSTPONE_SPREAD = 0.5


def scarcity(available: float, reserve: float) -> float:
    """0 while a hedge would leave at least ``reserve`` hedges in the budget, 1 when it would
    empty it (or cannot be paid for), linear in between; 0 without a reserve."""
    if reserve <= 0.0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - (available - 1.0) / reserve))


def first_hedge_delay_ms(quantile_ms: float, median_ms: float, shortage: float = 0.0) -> float:
    """The first hedge's delay from the pooled quantile and median (``shortage``: scarcity)."""
    delay_ms = min(quantile_ms, LATE_MEDIAN_FACTOR * median_ms)
    return delay_ms + POSTPONE_SPREAD * max(0.0, delay_ms - median_ms) * shortage

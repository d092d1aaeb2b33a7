"""Decaying latency estimates of one deployment, and quantiles of its recent TTFTs.

TTFT is tracked as a typical value (a time-weighted EWMA) raised by *corroborated* slowness:
the second-slowest of the last few samples (each fading with time), or the median wait of
the requests still waiting for their first token when two or more are. Corroborated, not
one slow sample, because with a heavy tail (a few percent of stragglers at 10x) a single
peak would keep every healthy deployment penalised much of the time and send traffic to a
really degraded one. And the median of the waiting, not their maximum, because stragglers
wait ten times longer, so they are a quarter of what is waiting at any moment on a healthy
deployment, while on a degraded one every waiting request is late. When most recent samples
sit above the typical value (a level shift, not a tail), the EWMA follows 4x faster.
Times come from the caller (``now_s``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

MIN_EWMA_ALPHA = 1.0 / 16.0  # a busy deployment still follows a level shift in ~16 samples
# Once most recent samples are slow, the typical value follows 4x faster: the evidence fades
# within penalty_decay_s, and by then the EWMA must have learnt the new level.
SHIFT_EWMA_ALPHA = 0.25
SHIFT_MARGIN = 1.25  # "slow" for the shift test: above the typical value by this factor
TPOT_ALPHA = 0.2
# The quantile windows: per deployment, pooled over the healthy ones for the hedge delay. 512,
# not 256: with a few percent of stragglers a p96 sits at the edge of the healthy body, and a
# smaller window more often holds more stragglers than that and throws the delay out to them
# (hedge_virtual.py, 60 seeds: p99.9 at 4x in 22 seeds against 15 with 256).
NUM_RECENT_SAMPLES = 512
NUM_EVIDENCE_SAMPLES = 8  # two stragglers at 3% among 8 samples: ~2% of the time


def second_largest(values: Iterable[float]) -> float:
    """The second-largest value (0 when there are fewer than two)."""
    first = second = 0.0
    for value in values:
        if value > first:
            first, second = value, first
        elif value > second:
            second = value
    return second


def lower_median(values: list[float]) -> float:
    """The lower median (of two, the smaller); 0 for no values."""
    if not values:
        return 0.0
    return sorted(values)[(len(values) - 1) // 2]


class LatencyEstimate:
    """TTFT (typical + corroborated slowness), time per output token, probe RTT, recent TTFTs."""

    def __init__(self, *, ewma_decay_s: float, penalty_decay_s: float) -> None:
        self._decay_s = ewma_decay_s
        self._penalty_decay_s = penalty_decay_s
        self._ttft_ewma_ms: float | None = None
        self.updated_s: float | None = None  # when the last TTFT sample (or bound) arrived
        self._evidence: deque[tuple[float, float]] = deque(maxlen=NUM_EVIDENCE_SAMPLES)
        self.tpot_ms: float | None = None
        self.probe_rtt_ms: float | None = None
        self.num_samples = 0
        self._recent: deque[float] = deque(maxlen=NUM_RECENT_SAMPLES)
        self._sorted: list[float] | None = None
        # (newest sample time, second-largest sample faded to it): see _faded_second_ms.
        self._second: tuple[float, float] | None = None

    @property
    def typical_ttft_ms(self) -> float | None:
        return self._ttft_ewma_ms

    @property
    def recent_median_ms(self) -> float:
        """The lower median of the last few samples and bounds, unfaded (0 before any)."""
        return lower_median([ttft_ms for _, ttft_ms in self._evidence])

    def slowness_ms(self, now_s: float, waiting_ms: Iterable[float] = ()) -> float:
        """Corroborated slowness: the second-slowest recent sample (fading with age), or the
        median wait of the requests still waiting when there are two or more."""
        waiting = list(waiting_ms)
        waited_ms = lower_median(waiting) if len(waiting) >= 2 else 0.0
        return max(self._faded_second_ms(now_s), waited_ms)

    def _faded_second_ms(self, now_s: float) -> float:
        # Every sample fades by the same factor per second, so which one is second-largest
        # changes with the evidence, not with time: found once per new sample, then faded in
        # one step (the router asks this for every deployment on every request).
        decay_s = self._penalty_decay_s
        second = self._second
        if second is None:
            newest_s = max((at_s for at_s, _ in self._evidence), default=0.0)
            faded = (t * math.exp((at_s - newest_s) / decay_s) for at_s, t in self._evidence)
            second = self._second = (newest_s, second_largest(faded))
        newest_s, second_ms = second
        if now_s >= newest_s:
            return second_ms * math.exp((newest_s - now_s) / decay_s)
        # A clock behind the newest sample: samples from its future do not fade at all.
        return second_largest(
            t * math.exp(-max(0.0, now_s - at_s) / decay_s) for at_s, t in self._evidence
        )

    def _add_evidence(self, now_s: float, ttft_ms: float) -> None:
        self._evidence.append((now_s, ttft_ms))
        self._second = None

    def ttft_ms(self, now_s: float, waiting_ms: Iterable[float] = ()) -> float | None:
        """The estimate used for choosing; None before any sample, probe or waiting request."""
        slowness_ms = self.slowness_ms(now_s, waiting_ms)
        base = self._ttft_ewma_ms if self._ttft_ewma_ms is not None else self.probe_rtt_ms
        if base is None:
            return slowness_ms or None
        # A round trip is a floor: no answer can come faster than the network allows.
        return max(base, self.probe_rtt_ms or 0.0, slowness_ms)

    def observe_ttft(self, ttft_ms: float, now_s: float) -> None:
        self._learn(ttft_ms, now_s)
        self.num_samples += 1
        self._recent.append(ttft_ms)
        self._sorted = None

    def _learn(self, ttft_ms: float, now_s: float) -> None:
        self._add_evidence(now_s, ttft_ms)
        ewma = self._ttft_ewma_ms
        if ewma is None:
            self._ttft_ewma_ms = ttft_ms
        else:
            # Time-weighted (an old estimate counts for less), but never frozen when busy.
            elapsed_s = max(0.0, now_s - (self.updated_s or now_s))
            alpha = max(MIN_EWMA_ALPHA, 1.0 - math.exp(-elapsed_s / self._decay_s))
            recent_ms = lower_median([sample for _, sample in self._evidence])
            if ttft_ms > ewma and recent_ms > SHIFT_MARGIN * ewma:
                alpha = max(alpha, SHIFT_EWMA_ALPHA)
            self._ttft_ewma_ms = ewma + alpha * (ttft_ms - ewma)
        self._touch(now_s)

    def _touch(self, now_s: float) -> None:
        # A sample from another replica may be a little older than the newest local one.
        self.updated_s = now_s if self.updated_s is None else max(self.updated_s, now_s)

    def observe_censored(self, elapsed_ms: float, now_s: float, *, is_tail: bool = False) -> None:
        """An attempt abandoned after ``elapsed_ms`` without a token: TTFT was at least that.

        It is evidence of slowness at once; with ``is_tail`` (abandoned past the hedge delay)
        the quantiles learn from it too, taking the lower bound as the sample: it is above
        the quantiles that matter, and shorter ones say nothing about the tail.
        """
        if is_tail and (self._ttft_ewma_ms is None or elapsed_ms >= self._ttft_ewma_ms):
            # A lower bound still beats silence: without it a deployment whose every slow
            # answer is hedged away would keep its old, fast typical value forever.
            self.observe_ttft(elapsed_ms, now_s)
        elif is_tail:
            # A bound below the typical value does not say the deployment got faster: a
            # degraded one whose tries are hedged away at the delay would otherwise learn the
            # delay as its TTFT and be tried again and again. It is fresh evidence that it is
            # still slow, though (no drift back yet), and a tail sample for the quantiles.
            self._add_evidence(now_s, elapsed_ms)
            self._touch(now_s)
            self.num_samples += 1
            self._recent.append(elapsed_ms)
            self._sorted = None
        elif self._ttft_ewma_ms is None or elapsed_ms > self._ttft_ewma_ms:
            self._add_evidence(now_s, elapsed_ms)

    def observe_tpot(self, tpot_ms: float) -> None:
        current = self.tpot_ms
        self.tpot_ms = tpot_ms if current is None else current + TPOT_ALPHA * (tpot_ms - current)

    def observe_probe(self, rtt_ms: float) -> None:
        current = self.probe_rtt_ms
        self.probe_rtt_ms = rtt_ms if current is None else current + 0.3 * (rtt_ms - current)

    def recent_samples(self) -> list[float]:
        return list(self._recent)

    def quantile_ms(self, quantile: float) -> float | None:
        """Nearest-rank quantile of the recent TTFT samples; None when there are none."""
        if not self._recent:
            return None
        if self._sorted is None:
            self._sorted = sorted(self._recent)
        return nearest_rank(self._sorted, quantile)


# Deployments whose typical TTFT is within this factor of the fastest's share one hedge
# clock: their samples are pooled for the hedge quantile.
HEALTHY_TYPICAL_FACTOR = 1.5


def healthy_quantile_ms(windows: Sequence[tuple[float, Sequence[float]]], quantile: float) -> float:
    """The quantile of the pooled samples of the deployments as fast as the fastest.

    ``windows`` holds, per deployment, its typical TTFT and its recent samples. Pooled, not
    the minimum of each deployment's own quantile: with a few percent of stragglers a p96
    over one window swings with how many stragglers it happens to hold, and the minimum of
    three such swings sits low, so more requests outwait the delay than the budget affords
    and real stragglers are refused a hedge. A deployment typically much slower than the
    fastest (degraded) stays out, judged by its typical value and not its window: an avoided
    deployment's window is mostly old, fast samples plus its few new slow ones, which would
    push the pooled quantile up and postpone every hedge.
    """
    return nearest_rank(healthy_pooled(windows), quantile)


def healthy_pooled(windows: Sequence[tuple[float, Sequence[float]]]) -> list[float]:
    """The samples ``healthy_quantile_ms`` ranks, sorted: every quantile of them from one sort."""
    usable = [(typical_ms, w) for typical_ms, w in windows if w]
    if not usable:
        raise ValueError("no samples")
    fastest_ms = min(typical_ms for typical_ms, _ in usable)
    limit_ms = HEALTHY_TYPICAL_FACTOR * fastest_ms
    pooled: list[float] = []
    for typical_ms, window in usable:
        if typical_ms <= limit_ms:
            pooled.extend(window)
    pooled.sort()  # lists, not a generator: ~15 us for three windows of 512 samples
    return pooled


def nearest_rank(ordered: list[float], quantile: float) -> float:
    index = min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))
    return ordered[index]

"""Decaying latency estimates of one deployment, and quantiles of its recent TTFTs.

TTFT is tracked as a typical value plus a peak penalty (after Finagle's peak-EWMA): a slow
sample raises the estimate at once, so a deployment that starts degrading loses traffic
within a few requests, while the penalty fades with time so one straggler is soon forgiven
and a recovered deployment is tried again. Times come from the caller (``now_s``).
"""

from __future__ import annotations

import math
from collections import deque

MIN_EWMA_ALPHA = 1.0 / 16.0  # a busy deployment still follows a level shift in ~16 samples
TPOT_ALPHA = 0.2
NUM_RECENT_SAMPLES = 256


class DecayingPenalty:
    """A value that jumps up on demand and decays exponentially with time towards zero."""

    __slots__ = ("_at_s", "_decay_s", "_value_ms")

    def __init__(self, decay_s: float) -> None:
        self._decay_s = decay_s
        self._value_ms = 0.0
        self._at_s = 0.0

    def value_ms(self, now_s: float) -> float:
        if self._value_ms <= 0.0:
            return 0.0
        return self._value_ms * math.exp(-max(0.0, now_s - self._at_s) / self._decay_s)

    def raise_to(self, value_ms: float, now_s: float) -> None:
        if value_ms > self.value_ms(now_s):
            self._value_ms, self._at_s = value_ms, now_s


class LatencyEstimate:
    """TTFT (typical + peak penalty), time per output token, probe RTT, recent TTFTs."""

    def __init__(self, *, ewma_decay_s: float, penalty_decay_s: float) -> None:
        self._decay_s = ewma_decay_s
        self._ttft_ewma_ms: float | None = None
        self._updated_s = 0.0
        self.penalty = DecayingPenalty(penalty_decay_s)
        self.tpot_ms: float | None = None
        self.probe_rtt_ms: float | None = None
        self.num_samples = 0
        self._recent: deque[float] = deque(maxlen=NUM_RECENT_SAMPLES)
        self._sorted: list[float] | None = None

    @property
    def typical_ttft_ms(self) -> float | None:
        return self._ttft_ewma_ms

    def ttft_ms(self, now_s: float) -> float | None:
        """The estimate used for choosing; None before any sample or probe."""
        base = self._ttft_ewma_ms if self._ttft_ewma_ms is not None else self.probe_rtt_ms
        if base is None:
            return None
        # A round trip is a floor: no answer can come faster than the network allows.
        floor = self.probe_rtt_ms or 0.0
        return max(base, floor) + self.penalty.value_ms(now_s)

    def observe_ttft(self, ttft_ms: float, now_s: float) -> None:
        ewma = self._ttft_ewma_ms
        if ewma is None:
            self._ttft_ewma_ms = ttft_ms
        else:
            # Time-weighted (an old estimate counts for less), but never frozen when busy.
            elapsed_s = max(0.0, now_s - self._updated_s)
            alpha = max(MIN_EWMA_ALPHA, 1.0 - math.exp(-elapsed_s / self._decay_s))
            self._ttft_ewma_ms = ewma + alpha * (ttft_ms - ewma)
            if ttft_ms > ewma:
                self.penalty.raise_to(ttft_ms - ewma, now_s)
        self._updated_s = now_s
        self.num_samples += 1
        self._recent.append(ttft_ms)
        self._sorted = None

    def observe_censored(self, elapsed_ms: float, now_s: float, *, is_tail: bool = False) -> None:
        """An attempt abandoned after ``elapsed_ms`` without a token: TTFT was at least that.

        The penalty learns from it; with ``is_tail`` (abandoned past the hedge delay) the
        typical value and the quantiles do too, taking the lower bound as the sample: it is
        above the quantiles that matter, and shorter ones say nothing about the tail.
        """
        ewma = self._ttft_ewma_ms
        if ewma is None:
            self.penalty.raise_to(elapsed_ms, now_s)
        elif elapsed_ms > ewma:
            self.penalty.raise_to(elapsed_ms - ewma, now_s)
        if is_tail:
            # A lower bound still beats silence: without it a deployment whose every slow
            # answer is hedged away would keep its old, fast typical value forever.
            self.observe_ttft(elapsed_ms, now_s)

    def observe_tpot(self, tpot_ms: float) -> None:
        current = self.tpot_ms
        self.tpot_ms = tpot_ms if current is None else current + TPOT_ALPHA * (tpot_ms - current)

    def observe_probe(self, rtt_ms: float) -> None:
        current = self.probe_rtt_ms
        self.probe_rtt_ms = rtt_ms if current is None else current + 0.3 * (rtt_ms - current)

    def quantile_ms(self, quantile: float) -> float | None:
        """Nearest-rank quantile of the recent TTFT samples; None when there are none."""
        if not self._recent:
            return None
        if self._sorted is None:
            self._sorted = sorted(self._recent)
        index = min(len(self._sorted) - 1, max(0, math.ceil(quantile * len(self._sorted)) - 1))
        return self._sorted[index]

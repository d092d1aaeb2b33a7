"""Log-binned latency histograms: O(1) to record, quantiles within a fixed relative error.

The dashboard's rolling window keeps one sparse histogram per second and a dense running
total over its span, so a request costs a logarithm and two increments, and a quantile over
the last minutes costs a walk of a few hundred bins instead of a sort of every sample.
"""

from __future__ import annotations

import math
from collections import Counter

MIN_MS = 0.01  # anything faster shares the first bin
GROWTH = 1.04  # each bin is 4% wider than the last: a quantile is off by at most ~2%
MAX_MS = 24 * 3600 * 1000.0  # a day; slower samples share the last bin
_LOG_GROWTH = math.log(GROWTH)
NUM_BINS = math.ceil(math.log(MAX_MS / MIN_MS) / _LOG_GROWTH) + 1


def bin_of(value_ms: float) -> int:
    """The bin of a sample: bin ``i`` holds ``[MIN_MS * GROWTH**i, MIN_MS * GROWTH**(i+1))``."""
    if not value_ms > MIN_MS:  # also NaN
        return 0
    return min(NUM_BINS - 1, int(math.log(value_ms / MIN_MS) / _LOG_GROWTH))


def bin_value_ms(index: int) -> float:
    """The value a bin reports: the geometric middle of its bounds."""
    return MIN_MS * math.pow(GROWTH, index + 0.5)


def bin_bounds_ms(index: int) -> tuple[float, float]:
    return MIN_MS * math.pow(GROWTH, index), MIN_MS * math.pow(GROWTH, index + 1)


def rank(quantile: float, count: int) -> int:
    """The nearest rank (1-based) of ``quantile`` among ``count`` sorted samples."""
    return max(1, min(count, math.ceil(quantile * count)))


class DenseHistogram:
    """A histogram over every bin: the running total of a window."""

    __slots__ = ("bins", "count")

    def __init__(self) -> None:
        self.bins = [0] * NUM_BINS
        self.count = 0

    def add(self, index: int, amount: int = 1) -> None:
        self.bins[index] += amount
        self.count += amount

    def remove(self, sparse: Counter[int]) -> None:
        """Takes out a second that left the window."""
        for index, amount in sparse.items():
            self.bins[index] -= amount
            self.count -= amount

    def quantiles_ms(self, quantiles: tuple[float, ...]) -> list[float | None]:
        """The nearest-rank value of each quantile (ascending), None when empty."""
        if self.count == 0:
            return [None] * len(quantiles)
        ranks = [rank(q, self.count) for q in quantiles]
        found: list[float | None] = []
        seen = 0
        wanted = iter(ranks)
        target = next(wanted)
        for index, amount in enumerate(self.bins):
            seen += amount
            while seen >= target:
                found.append(bin_value_ms(index))
                next_target = next(wanted, None)
                if next_target is None:
                    return found
                target = next_target
        raise AssertionError("histogram count does not match its bins")


def sparse_quantile_ms(sparse: Counter[int], quantile: float) -> float | None:
    """The nearest-rank value of one second's histogram (few distinct bins)."""
    count = sum(sparse.values())
    if count == 0:
        return None
    target = rank(quantile, count)
    seen = 0
    for index in sorted(sparse):
        seen += sparse[index]
        if seen >= target:
            return bin_value_ms(index)
    raise AssertionError("unreachable: the ranks cover the count")

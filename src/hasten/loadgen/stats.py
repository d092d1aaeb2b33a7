"""Pure summary statistics for latency samples: percentiles and a fixed-shape summary.

Unit-agnostic: callers pass values in the unit they name the field after (``latency_ms``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Below this many samples p99.9 is just the maximum wearing a costume; omit it.
MIN_SAMPLES_FOR_P99_9 = 1000


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (numpy's default, "type 7") of ascending values.

    ``fraction`` is in [0, 1]; ``sorted_values`` must be non-empty and ascending.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    position = (len(sorted_values) - 1) * fraction
    lower_index = math.floor(position)
    upper_index = min(lower_index + 1, len(sorted_values) - 1)
    lower = sorted_values[lower_index]
    upper = sorted_values[upper_index]
    value = lower + (position - lower_index) * (upper - lower)
    # Rounding can push the interpolation an ulp outside its bracket; keep it monotone.
    return min(max(value, lower), upper)


@dataclass(frozen=True, slots=True)
class Summary:
    """Distribution of one measured quantity."""

    count: int
    mean: float
    min: float
    p50: float
    p95: float
    p99: float
    p99_9: float | None
    max: float

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary | None:
    """Summary of ``values`` (any order), or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    count = len(ordered)
    return Summary(
        count=count,
        mean=math.fsum(ordered) / count,
        min=ordered[0],
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        p99=percentile(ordered, 0.99),
        p99_9=percentile(ordered, 0.999) if count >= MIN_SAMPLES_FOR_P99_9 else None,
        max=ordered[-1],
    )


def scaled(values: Sequence[float], factor: float) -> list[float]:
    """``values`` multiplied by ``factor`` (seconds to milliseconds, typically)."""
    return [value * factor for value in values]


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when the denominator is zero."""
    return numerator / denominator if denominator else None


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (numpy's ``np.std`` default, ddof=0).

    Zero for both when there are no values, as vLLM's ``np.mean(values or 0)`` reports.
    """
    if not values:
        return 0.0, 0.0
    mean = math.fsum(values) / len(values)
    variance = math.fsum((value - mean) ** 2 for value in values) / len(values)
    return mean, math.sqrt(variance)


def cdf_points(values: Sequence[float], max_points: int = 400) -> list[tuple[float, float]]:
    """Points (value, fraction of values at or below it) of the empirical CDF, ascending.

    Long inputs are thinned to about ``max_points`` evenly spaced ranks; the first and
    last points (minimum at 1/n, maximum at 1.0) are always kept.
    """
    finite = sorted(value for value in values if math.isfinite(value))
    count = len(finite)
    if not count:
        return []
    step = max(1, math.ceil(count / max(max_points, 1)))
    ranks = list(range(0, count, step))
    if ranks[-1] != count - 1:
        ranks.append(count - 1)
    return [(finite[rank], (rank + 1) / count) for rank in ranks]


@dataclass(frozen=True, slots=True)
class Bin:
    """One histogram bar: values in [low, high), the last bin closed at its top."""

    low: float
    high: float
    count: int


def histogram(
    values: Sequence[float],
    num_bins: int = 30,
    *,
    low: float | None = None,
    high: float | None = None,
) -> list[Bin]:
    """Equal-width bins over [low, high] (default: the finite values' range).

    Values outside given bounds are left out; pass the same bounds to overlay two series.
    """
    if num_bins < 1:
        raise ValueError("num_bins must be at least 1")
    finite = [value for value in values if math.isfinite(value)]
    if not finite and (low is None or high is None):
        return []
    low = min(finite) if low is None else low
    high = max(finite) if high is None else high
    if high < low:
        raise ValueError("high must not be below low")
    inside = [value for value in finite if low <= value <= high]
    if high == low:
        return [Bin(low, high, len(inside))]
    width = (high - low) / num_bins
    counts = [0] * num_bins
    for value in inside:
        counts[min(int((value - low) / width), num_bins - 1)] += 1
    return [
        Bin(low + index * width, low + (index + 1) * width, count)
        for index, count in enumerate(counts)
    ]

"""Pure statistics of hasten bench: percentiles and summaries."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.stats import MIN_SAMPLES_FOR_P99_9, percentile, ratio, summarize

latencies = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
samples = st.lists(latencies, min_size=1, max_size=300)
fractions = st.floats(min_value=0.0, max_value=1.0)


@given(samples, fractions)
def test_percentile_lies_within_the_data(values: list[float], fraction: float) -> None:
    ordered = sorted(values)
    assert ordered[0] <= percentile(ordered, fraction) <= ordered[-1]


@given(samples, fractions, fractions)
def test_percentile_is_monotone_in_the_fraction(values: list[float], a: float, b: float) -> None:
    ordered = sorted(values)
    low, high = min(a, b), max(a, b)
    assert percentile(ordered, low) <= percentile(ordered, high)


@given(samples)
def test_percentile_ends_and_middle(values: list[float]) -> None:
    ordered = sorted(values)
    assert percentile(ordered, 0.0) == ordered[0]
    assert percentile(ordered, 1.0) == ordered[-1]
    assert math.isclose(percentile(ordered, 0.5), statistics.median(values), abs_tol=1e-6)


@given(st.lists(latencies, min_size=2, max_size=200))
def test_percentile_matches_inclusive_quantiles(values: list[float]) -> None:
    ordered = sorted(values)
    expected = statistics.quantiles(values, n=100, method="inclusive")
    for rank, quantile in enumerate(expected, start=1):
        assert math.isclose(percentile(ordered, rank / 100), quantile, rel_tol=1e-9, abs_tol=1e-6)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_percentile_interpolates_linearly() -> None:
    assert percentile([10.0, 20.0], 0.25) == pytest.approx(12.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)


@given(st.lists(latencies, min_size=1, max_size=1500))
def test_summary_is_ordered_and_counts(values: list[float]) -> None:
    summary = summarize(values)
    assert summary is not None
    assert summary.count == len(values)
    assert summary.min <= summary.p50 <= summary.p95 <= summary.p99 <= summary.max
    assert summary.min <= summary.mean * (1 + 1e-9) + 1e-9
    assert summary.mean <= summary.max * (1 + 1e-9) + 1e-9
    if len(values) >= MIN_SAMPLES_FOR_P99_9:
        assert summary.p99_9 is not None
        assert summary.p99 <= summary.p99_9 <= summary.max
    else:
        assert summary.p99_9 is None


def test_summary_of_nothing_is_none_and_serializes() -> None:
    assert summarize([]) is None
    summary = summarize([3.0, 1.0, 2.0])
    assert summary is not None
    assert summary.to_dict() == {
        "count": 3,
        "mean": 2.0,
        "min": 1.0,
        "p50": 2.0,
        "p95": pytest.approx(2.9),
        "p99": pytest.approx(2.98),
        "p99_9": None,
        "max": 3.0,
    }


def test_ratio_of_zero_denominator_is_none() -> None:
    assert ratio(3, 0) is None
    assert ratio(1, 4) == 0.25

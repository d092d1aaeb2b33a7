"""Pure statistics of hasten bench: percentiles, summaries, CDF points and histograms."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.stats import (
    MIN_SAMPLES_FOR_P99_9,
    Bin,
    cdf_points,
    histogram,
    mean_and_std,
    percentile,
    ratio,
    summarize,
)

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


@given(st.lists(latencies, min_size=0, max_size=500), st.integers(min_value=1, max_value=50))
def test_cdf_is_monotone_and_ends_at_one(values: list[float], max_points: int) -> None:
    points = cdf_points(values, max_points=max_points)
    if not values:
        assert points == []
        return
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    assert xs == sorted(xs) and ys == sorted(ys)
    assert points[0][0] == min(values) and points[-1] == (max(values), 1.0)
    assert all(0.0 < y <= 1.0 for y in ys)
    assert len(points) <= max_points + 1


def test_cdf_fractions_count_values_at_or_below() -> None:
    assert cdf_points([3.0, 1.0, 2.0, 2.0]) == [(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]
    assert cdf_points([math.nan, 1.0]) == [(1.0, 1.0)]


@given(st.lists(latencies, min_size=1, max_size=300), st.integers(min_value=1, max_value=40))
def test_histogram_keeps_every_value_in_contiguous_bins(values: list[float], num_bins: int) -> None:
    bins = histogram(values, num_bins)
    assert sum(b.count for b in bins) == len(values)
    assert bins[0].low == min(values)
    assert math.isclose(bins[-1].high, max(values), rel_tol=1e-9, abs_tol=1e-9)
    for left, right in itertools.pairwise(bins):
        assert math.isclose(left.high, right.low, rel_tol=1e-9, abs_tol=1e-9)


def test_histogram_with_shared_bounds_leaves_outsiders_out() -> None:
    bins = histogram([0.0, 5.0, 9.99, 10.0, 11.0], 2, low=0.0, high=10.0)
    assert [(b.low, b.high, b.count) for b in bins] == [(0.0, 5.0, 1), (5.0, 10.0, 3)]
    assert histogram([4.0, 4.0], 5) == [Bin(4.0, 4.0, 2)]
    assert histogram([], 3) == []
    with pytest.raises(ValueError):
        histogram([1.0], 0)


@given(st.lists(latencies, min_size=1, max_size=300))
def test_mean_and_std_match_numpy(values: list[float]) -> None:
    mean, std = mean_and_std(values)
    assert math.isclose(mean, float(numpy.mean(values)), rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(std, float(numpy.std(values)), rel_tol=1e-6, abs_tol=1e-6)


def test_mean_and_std_of_nothing_are_zero() -> None:
    assert mean_and_std([]) == (0.0, 0.0)

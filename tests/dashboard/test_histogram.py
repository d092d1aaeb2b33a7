"""hasten.dashboard.histogram: bins, nearest-rank quantiles, removal of a second."""

from __future__ import annotations

import math
import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from hasten.dashboard.histogram import (
    GROWTH,
    MIN_MS,
    NUM_BINS,
    DenseHistogram,
    bin_bounds_ms,
    bin_of,
    bin_value_ms,
    rank,
    sparse_quantile_ms,
)


def exact_nearest_rank(samples: list[float], quantile: float) -> float:
    return sorted(samples)[rank(quantile, len(samples)) - 1]


@given(st.floats(min_value=MIN_MS * 1.001, max_value=1e7))
def test_a_sample_lies_in_its_bin(value_ms: float) -> None:
    low, high = bin_bounds_ms(bin_of(value_ms))
    # One ulp of slack: the bin index comes from a logarithm.
    assert low * (1 - 1e-12) <= value_ms < high * (1 + 1e-12)


def test_tiny_nan_and_huge_samples_share_the_end_bins() -> None:
    assert bin_of(0.0) == bin_of(-5.0) == bin_of(math.nan) == bin_of(MIN_MS) == 0
    assert bin_of(1e12) == NUM_BINS - 1


def test_nearest_rank() -> None:
    assert [rank(q, 10) for q in (0.0, 0.5, 0.95, 0.99, 1.0)] == [1, 5, 10, 10, 10]
    assert rank(0.5, 1) == 1


@given(
    st.lists(st.floats(min_value=0.05, max_value=1e6), min_size=1, max_size=300),
    st.sampled_from([0.5, 0.95, 0.99]),
)
def test_quantiles_are_the_nearest_rank_sample_within_half_a_bin(
    samples: list[float], quantile: float
) -> None:
    dense = DenseHistogram()
    sparse: Counter[int] = Counter()
    for value in samples:
        dense.add(bin_of(value))
        sparse[bin_of(value)] += 1
    exact = exact_nearest_rank(samples, quantile)
    (from_dense,) = dense.quantiles_ms((quantile,))
    from_sparse = sparse_quantile_ms(sparse, quantile)
    assert from_dense == from_sparse == bin_value_ms(bin_of(exact))
    assert from_dense is not None
    assert exact / math.sqrt(GROWTH) <= from_dense * (1 + 1e-9)
    assert from_dense <= exact * math.sqrt(GROWTH) * (1 + 1e-9)


def test_several_quantiles_in_one_walk_and_removal() -> None:
    rng = random.Random(7)
    first = [rng.uniform(1, 100) for _ in range(500)]
    second = [rng.uniform(200, 300) for _ in range(500)]
    dense = DenseHistogram()
    gone: Counter[int] = Counter()
    for value in first:
        dense.add(bin_of(value))
        gone[bin_of(value)] += 1
    for value in second:
        dense.add(bin_of(value))
    both = first + second
    expected = [bin_value_ms(bin_of(exact_nearest_rank(both, q))) for q in (0.5, 0.95, 0.99)]
    assert dense.quantiles_ms((0.5, 0.95, 0.99)) == expected
    dense.remove(gone)
    assert dense.count == 500
    assert dense.quantiles_ms((0.5,)) == [bin_value_ms(bin_of(exact_nearest_rank(second, 0.5)))]


def test_empty_histograms_have_no_quantiles() -> None:
    assert DenseHistogram().quantiles_ms((0.5, 0.99)) == [None, None]
    assert sparse_quantile_ms(Counter(), 0.5) is None

"""bench/semantic/fitting.py: the Wilson bound and the isotonic table the calibration is fitted
with."""

from __future__ import annotations

import pytest

from bench.semantic import fitting


def test_wilson_lower_bound() -> None:
    assert fitting.wilson_lower(0, 0) == 0.0
    assert fitting.wilson_lower(50, 50) == pytest.approx(0.9487, abs=1e-4)
    assert fitting.wilson_lower(95, 100) < 0.95 < fitting.wilson_lower(995, 1000)


def test_isotonic_bins_are_monotone_and_pool_small_blocks() -> None:
    scores = [i / 100 for i in range(100)]
    # Wrong below 0.5, right above, one wrong at the top: isotonic pools it in.
    outcomes = [i >= 50 for i in range(100)]
    outcomes[99] = False
    table = fitting.isotonic_bins(scores, outcomes, min_per_bin=10)
    bounds = [bound for _, bound in table]
    assert bounds == sorted(bounds)
    lowest_edges = [low for low, _ in table]
    assert lowest_edges == sorted(lowest_edges) and lowest_edges[0] == 0.0
    top_low, top_bound = table[-1]
    assert top_low >= 0.5 and 0.8 < top_bound < 49 / 50

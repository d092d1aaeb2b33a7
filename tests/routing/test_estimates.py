"""Unit tests for hasten.routing.estimates: TTFT level, stragglers, stalls, quantiles."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.routing.estimates import LatencyEstimate, second_largest


def test_estimate_follows_level_and_ignores_a_lone_straggler() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    assert estimate.ttft_ms(0.0) is None
    for i in range(50):
        estimate.observe_ttft(300.0, i * 0.1)
    assert estimate.ttft_ms(5.0) == pytest.approx(300.0)
    estimate.observe_ttft(3000.0, 5.0)
    # One straggler moves only the typical value, by its 1/16 share.
    lone = estimate.ttft_ms(5.0)
    assert lone is not None and 300.0 < lone < 500.0


def test_corroborated_slowness_counts_at_once_and_fades() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for i in range(50):
        estimate.observe_ttft(300.0, i * 0.1)
    estimate.observe_ttft(1500.0, 5.0)
    estimate.observe_ttft(1500.0, 5.1)
    assert estimate.ttft_ms(5.1) == pytest.approx(1500.0 * math.exp(-0.1 / 5.0))
    typical = estimate.typical_ttft_ms
    faded = estimate.ttft_ms(30.0)
    assert faded is not None and faded == pytest.approx(typical)
    # Most recent samples slow: a level shift, which the typical value follows 4x faster.
    for i in range(3):
        estimate.observe_ttft(1500.0, 5.2 + 0.1 * i)
    typical = estimate.typical_ttft_ms
    assert typical is not None and typical > 300.0 + 0.4 * 1200.0


def test_two_requests_waiting_are_evidence_one_is_not() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for i in range(20):
        estimate.observe_ttft(100.0, i * 0.1)
    assert estimate.ttft_ms(2.0, [900.0]) == pytest.approx(100.0)
    assert estimate.ttft_ms(2.0, [900.0, 700.0]) == pytest.approx(700.0)


def test_censored_samples_are_evidence_but_not_quantiles() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for i in range(20):
        estimate.observe_ttft(100.0, i * 0.1)
    estimate.observe_censored(900.0, 2.0)
    estimate.observe_censored(800.0, 2.0)
    assert estimate.ttft_ms(2.0) == pytest.approx(800.0)
    assert estimate.quantile_ms(0.99) == 100.0
    estimate.observe_censored(50.0, 2.0)  # shorter than typical: says nothing
    assert estimate.ttft_ms(2.0) == pytest.approx(800.0)


def test_second_largest() -> None:
    assert second_largest([]) == 0.0 and second_largest([5.0]) == 0.0
    assert second_largest([1.0, 9.0, 3.0, 9.0]) == 9.0 and second_largest([4.0, 2.0]) == 2.0


def test_quantile_is_nearest_rank() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for value in range(1, 101):
        estimate.observe_ttft(float(value), 0.0)
    assert estimate.quantile_ms(0.95) == 95.0
    assert estimate.quantile_ms(0.5) == 50.0


def test_probe_rtt_is_a_prior_and_a_floor() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    estimate.observe_probe(40.0)
    assert estimate.ttft_ms(0.0) == 40.0
    estimate.observe_ttft(10.0, 0.0)
    assert estimate.ttft_ms(0.0) == 40.0


_times_s = st.floats(min_value=0.0, max_value=1000.0)
_samples_ms = st.floats(min_value=0.0, max_value=60_000.0)


@given(st.lists(st.tuples(_times_s, _samples_ms), max_size=12), _times_s)
def test_slowness_is_the_second_largest_sample_faded_to_now(
    samples: list[tuple[float, float]], now_s: float
) -> None:
    # Found once per sample and faded in one step: the same as fading each sample every time
    # (a sample from a clock ahead of now_s does not fade).
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for at_s, ttft_ms in samples:
        estimate.observe_censored(ttft_ms, at_s)
        assert estimate.slowness_ms(now_s) >= 0.0  # asked between samples too
    # The last 8 samples are the evidence (NUM_EVIDENCE_SAMPLES).
    expected = second_largest(t * math.exp(-max(0.0, now_s - a) / 5.0) for a, t in samples[-8:])
    assert estimate.slowness_ms(now_s) == pytest.approx(expected, rel=1e-9, abs=1e-9)

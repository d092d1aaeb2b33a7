"""The time-saved rule, driven by hand (no clock, no network)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.metrics.saved import (
    ESTIMATES_REUSE_S,
    DeploymentEstimate,
    SavedTime,
    expected_upstream_s,
    hedge_residual_s,
    pool_estimates,
    saved_s,
)
from hasten.routing.pool import DeploymentPool


def _estimate(
    ttft_s: float | None,
    tpot_s: float | None = None,
    *,
    priority: int = 0,
    is_available: bool = True,
) -> DeploymentEstimate:
    return DeploymentEstimate(ttft_s, tpot_s, priority, is_available)


def test_expected_latency_is_the_best_tier_cheapest_ttft_plus_tokens() -> None:
    estimates = [
        _estimate(0.5, 0.01),  # 0.5 + 10 x 0.01 = 0.6
        _estimate(0.2, 0.05),  # 0.2 + 10 x 0.05 = 0.7
        _estimate(0.01, 0.001, priority=1),  # a backup tier: not first-ranked
    ]
    assert expected_upstream_s(estimates, 10) == pytest.approx(0.6)
    assert expected_upstream_s(estimates, 0) == pytest.approx(0.2)


def test_unavailable_and_unmeasured_deployments_are_left_out() -> None:
    assert expected_upstream_s([_estimate(None), _estimate(None)], 5) is None
    estimates = [_estimate(0.1, is_available=False), _estimate(0.9, priority=2)]
    assert expected_upstream_s(estimates, 0) == pytest.approx(0.9)
    # Every breaker open: the least bad guess is still the measured tiers.
    assert expected_upstream_s([_estimate(0.3, is_available=False)], 0) == pytest.approx(0.3)
    # Without a TPOT estimate only the TTFT counts (an underestimate, never an overestimate).
    assert expected_upstream_s([_estimate(0.3)], 100) == pytest.approx(0.3)


def _by_the_rule(estimates: list[DeploymentEstimate], num_tokens: int) -> float | None:
    """The module docstring's rule, step by step."""
    known = [e for e in estimates if e.ttft_s is not None]
    usable = [e for e in known if e.is_available] or known
    if not usable:
        return None
    best = min(e.priority for e in usable)
    return min(
        (e.ttft_s or 0.0) + (e.tpot_s or 0.0) * max(0, num_tokens)
        for e in usable
        if e.priority == best
    )


_seconds = st.none() | st.floats(min_value=0.0, max_value=100.0)
_estimates = st.builds(DeploymentEstimate, _seconds, _seconds, st.integers(0, 3), st.booleans())


@given(st.lists(_estimates, max_size=6), st.integers(-5, 5000))
def test_expected_latency_follows_the_rule(
    estimates: list[DeploymentEstimate], num_tokens: int
) -> None:
    assert expected_upstream_s(estimates, num_tokens) == _by_the_rule(estimates, num_tokens)


def test_saving_is_floored_at_zero_and_absent_without_an_estimate() -> None:
    assert saved_s(0.5, 0.1) == pytest.approx(0.4)
    assert saved_s(0.5, 0.9) == 0.0
    assert saved_s(None, 0.1) is None


def test_hedge_residual_is_the_mean_excess_over_the_samples_above_the_abandon_time() -> None:
    samples_ms = [100.0, 200.0, 1200.0, 2200.0]
    assert hedge_residual_s(samples_ms, 700.0) == pytest.approx((500.0 + 1500.0) / 2 / 1000.0)
    assert hedge_residual_s(samples_ms, 5000.0) is None
    assert hedge_residual_s([], 10.0) is None


def _pool() -> DeploymentPool:
    deployments = [DeploymentConfig("a"), DeploymentConfig("b", priority=1)]
    return DeploymentPool(deployments, RoutingConfig(), random.Random(1))


class _Pools:
    def __init__(self, pool: DeploymentPool) -> None:
        self.pool = pool

    def existing_pool(self, name: str) -> DeploymentPool | None:
        return self.pool if name == "m" else None


def test_saved_time_reads_the_live_pool_estimates() -> None:
    pool = _pool()
    saved = SavedTime(_Pools(pool))
    assert saved.answer_s("m", 10, 0.0, now_s=100.0) is None  # nothing measured yet
    assert saved.answer_s("other", 10, 0.0, now_s=100.0) is None  # no pool at all
    pool.on_first_token("a", 400.0, 100.0, is_probe=False)
    pool.on_stream_end("a", 100.0, tpot_ms=10.0, error="")
    estimates = pool_estimates(pool, 100.0)
    assert estimates[0] == DeploymentEstimate(0.4, 0.01, 0, True)
    assert estimates[1].ttft_s is None
    assert saved.answer_s("m", 10, 0.1, now_s=100.0) == pytest.approx(0.4 + 0.1 - 0.1)
    for ttft_ms in (300.0, 900.0, 1500.0):
        pool.on_first_token("a", ttft_ms, 101.0, is_probe=False)
    assert saved.hedge_s("m", "a", 600.0) == pytest.approx((300.0 + 900.0) / 2 / 1000.0)
    assert saved.hedge_s("m", "unknown", 600.0) is None


def test_the_estimates_are_read_again_once_the_pool_learns_or_they_age() -> None:
    pool = _pool()
    saved = SavedTime(_Pools(pool))
    pool.on_first_token("a", 400.0, 100.0, is_probe=False)
    assert saved.answer_s("m", 0, 0.0, now_s=100.0) == pytest.approx(0.4)
    # Behind the pool's back (no version change): the reading is reused while it is fresh.
    pool.deployments["a"].estimate.observe_probe(900.0)
    assert saved.answer_s("m", 0, 0.0, now_s=100.0 + ESTIMATES_REUSE_S / 2) == pytest.approx(0.4)
    assert saved.answer_s("m", 0, 0.0, now_s=100.0 + ESTIMATES_REUSE_S) == pytest.approx(0.9)
    # Anything the pool learns is read at once.
    pool.on_probe("a", 100.0 + ESTIMATES_REUSE_S, 2000.0, "")
    later = saved.answer_s("m", 0, 0.0, now_s=100.0 + ESTIMATES_REUSE_S)
    assert later is not None and later > 0.9

"""Hedge budget protection: exploration of avoided deployments, hedge clock, lower bounds.

Pure logic, time passed in by hand.
"""

from __future__ import annotations

import random

import pytest

from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.routing.estimates import LatencyEstimate, healthy_quantile_ms
from hasten.routing.exploration import is_slow, may_explore
from hasten.routing.pool import DeploymentPool
from tests.support.routing import make_pool, teach


def test_a_lower_bound_below_the_typical_value_does_not_lower_it() -> None:
    estimate = LatencyEstimate(ewma_decay_s=10.0, penalty_decay_s=5.0)
    for i in range(20):
        estimate.observe_ttft(1500.0, i * 0.1)
    estimate.observe_censored(750.0, 5.0, is_tail=True)  # hedged away at the delay
    assert estimate.typical_ttft_ms == pytest.approx(1500.0)
    assert estimate.updated_s == 5.0  # fresh evidence: no drift back yet
    assert estimate.quantile_ms(0.0) == 750.0  # still a tail sample for the quantiles
    estimate.observe_censored(2000.0, 6.0, is_tail=True)  # above: it does raise it
    assert estimate.typical_ttft_ms is not None and estimate.typical_ttft_ms > 1500.0


def test_hedge_quantile_pools_the_healthy_and_leaves_out_the_degraded() -> None:
    few_stragglers = [100.0] * 99 + [1000.0]
    many_stragglers = [100.0] * 91 + [1000.0] * 9
    degraded = [2000.0] * 100
    # Each healthy window alone: p96 100 and 1000; their minimum would be 100, pooled the
    # 10 stragglers of 200 samples put p96 among them.
    windows = [(100.0, few_stragglers), (110.0, many_stragglers), (2000.0, degraded)]
    assert healthy_quantile_ms(windows, 0.96) == 1000.0
    assert healthy_quantile_ms(windows, 0.5) == 100.0  # the degraded 2000s are left out
    assert healthy_quantile_ms([(2000.0, degraded)], 0.5) == 2000.0  # the fastest counts
    with pytest.raises(ValueError):
        healthy_quantile_ms([(100.0, [])], 0.5)


def test_slow_needs_a_slow_typical_value_and_slow_recent_samples() -> None:
    assert is_slow(1500.0, 1500.0, 300.0)
    assert not is_slow(1500.0, 300.0, 300.0)  # one straggler lifted the typical value
    assert not is_slow(300.0, 1500.0, 300.0)
    assert not is_slow(400.0, 400.0, 300.0)  # a little slower is for cost to weigh


def test_exploration_is_one_request_at_a_time_and_one_per_interval() -> None:
    assert may_explore(0.0, None, 0, 30.0)
    assert not may_explore(0.0, None, 1, 30.0)
    assert not may_explore(29.0, 0.0, 0, 30.0)
    assert may_explore(30.0, 0.0, 0, 30.0)


def test_an_avoided_deployment_gets_one_primary_per_interval() -> None:
    pool = make_pool()
    now_s = 0.0
    for name in ("a", "b", "c"):
        now_s = teach(pool, name, 300.0, 20, now_s)
    now_s = teach(pool, "c", 1500.0, 20, now_s)
    interval_s = pool.routing.explore_decay_s
    chosen = []
    for _ in range(1000):  # 50 s, requests done at once: only the gate keeps c out
        now_s += 0.05
        chosen.append(pool.rank(now_s).order[0])
    # c drifts back towards the fleet's estimate, so it would win draws against loaded
    # deployments; the gate lets it compete once per interval at most.
    assert chosen.count("c") <= 50.0 / interval_s + 1
    assert chosen.count("a") > 300 and chosen.count("b") > 300


def test_affinity_homes_are_not_gated() -> None:
    # A prefix-caching home looks slow after a few cold prompts; moving its keys away would
    # only make more prompts cold. Only power-of-two-choices draws are gated.
    deployments = [DeploymentConfig(upstream=n) for n in ("a", "b", "c")]
    pool = DeploymentPool(deployments, RoutingConfig(is_affinity_enabled=True), random.Random(1))
    now_s = 0.0
    for name in ("a", "b", "c"):
        now_s = teach(pool, name, 300.0, 20, now_s)
    home = pool.rank(now_s, affinity_key=12345).order[0]
    now_s = teach(pool, home, 1500.0, 20, now_s)
    for _ in range(5):
        now_s += 0.05
        ranking = pool.rank(now_s, affinity_key=12345)
        assert (ranking.order[0], ranking.reason) == (home, "affinity")

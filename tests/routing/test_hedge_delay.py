"""Unit tests for hasten.routing.hedge_delay and the pool's use of it: the first hedge's delay
bounded by the median, postponed while a token bucket runs short, and refused hedges asked
for again."""

from __future__ import annotations

import pytest

from hasten.config.routing import HedgeConfig, RoutingConfig
from hasten.routing.hedge_delay import (
    LATE_MEDIAN_FACTOR,
    POSTPONE_SPREAD,
    first_hedge_delay_ms,
    scarcity,
)
from tests.support.routing import make_pool, teach


def test_scarcity_grows_from_the_reserve_down_to_the_last_hedge() -> None:
    assert scarcity(available=20.0, reserve=5.0) == 0.0
    assert scarcity(available=6.0, reserve=5.0) == 0.0  # the hedge leaves the whole reserve
    assert scarcity(available=3.5, reserve=5.0) == pytest.approx(0.5)
    assert scarcity(available=1.0, reserve=5.0) == 1.0  # the last hedge
    assert scarcity(available=0.0, reserve=5.0) == 1.0  # none left
    assert scarcity(available=0.0, reserve=0.0) == 0.0  # no reserve: never postponed


def test_the_delay_is_the_quantile_unless_it_is_past_twice_the_median() -> None:
    assert first_hedge_delay_ms(480.0, 300.0) == 480.0
    assert first_hedge_delay_ms(1000.0, 300.0) == LATE_MEDIAN_FACTOR * 300.0


def test_a_short_budget_postpones_the_delay_by_part_of_its_distance_from_the_median() -> None:
    assert first_hedge_delay_ms(500.0, 300.0, 1.0) == 500.0 + POSTPONE_SPREAD * 200.0
    assert first_hedge_delay_ms(500.0, 300.0, 0.5) == 500.0 + POSTPONE_SPREAD * 100.0
    assert first_hedge_delay_ms(1000.0, 300.0, 1.0) == 600.0 + POSTPONE_SPREAD * 300.0
    assert first_hedge_delay_ms(300.0, 300.0, 1.0) == 300.0  # nothing between them


HEDGE = HedgeConfig(is_enabled=True, min_samples=10, max_delay_ms=5000.0, budget_burst=20.0)


def test_a_window_holding_more_stragglers_than_the_budget_affords_hedges_at_twice_the_median() -> (
    None
):
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=HEDGE))
    now_s = teach(pool, "a", 300.0, 90, 0.0)
    now_s = teach(pool, "a", 3000.0, 10, now_s)  # 10% stragglers, a 5% budget: p96 is 3 s
    assert pool.hedge_delay_s("a") == pytest.approx(0.6)
    assert pool.hedge_delay_s("a", now_s) == pytest.approx(0.6)  # a full bucket


def test_the_pool_postpones_first_hedges_while_the_bucket_runs_short() -> None:
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=HEDGE))
    now_s = 0.0
    for value in (100.0, 120.0, 140.0, 160.0, 180.0) * 20:  # median 140, p96 180
        now_s = teach(pool, "a", value, 1, now_s)
    full_s = pool.hedge_delay_s("a", now_s)
    assert full_s == pytest.approx(0.18)
    while pool.budget.available(now_s) >= 1.0:
        assert pool.try_hedge(now_s)
    # Empty: half the way from the median to the delay again.
    assert pool.hedge_delay_s("a", now_s) == pytest.approx(0.18 + POSTPONE_SPREAD * 0.04)
    assert pool.hedge_delay_s("a") == pytest.approx(0.18)  # without the time: the full delay
    for _ in range(520):
        pool.on_request(now_s)  # 5% of 520 is 26: six hedges past the 20 spent
    assert pool.budget.available(now_s) == pytest.approx(6.0)
    assert pool.hedge_delay_s("a", now_s) == pytest.approx(0.18)  # the reserve is back


def test_a_sliding_window_budget_is_never_postponed() -> None:
    window = HedgeConfig(
        is_enabled=True, min_samples=10, max_delay_ms=5000.0, quantile=0.5, budget_burst=0.0
    )
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=window))
    now_s = teach(pool, "a", 200.0, 50, 0.0)
    assert pool.budget.available(now_s) == 0.0  # no requests in the window
    assert pool.hedge_delay_s("a", now_s) == pool.hedge_delay_s("a") == pytest.approx(0.2)


def test_a_refused_hedge_asks_again_after_a_typical_request() -> None:
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=HEDGE))
    assert pool.hedge_retry_s() == 5.0  # nothing measured: the ceiling
    now_s = teach(pool, "a", 250.0, 30, 0.0)
    teach(pool, "b", 350.0, 30, now_s)
    assert pool.hedge_retry_s() == pytest.approx(0.25)  # the pooled median (lower of two)
    window = make_pool(
        ("a", "b"), routing=RoutingConfig(hedge=HedgeConfig(is_enabled=True, budget_burst=0.0))
    )
    assert window.hedge_retry_s() is None  # the sliding window: refused for good

"""Unit tests for hasten.routing.pool: P2C, weights, priorities, breakers, affinity, hedge delay.
Pure logic: no sockets, no sleeps, time passed in by hand."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hasten.config.routing import HedgeConfig, RoutingConfig
from hasten.routing.pool import DeploymentPool
from tests.support.routing import BREAKER, make_pool, teach


def test_p2c_prefers_the_faster_deployment() -> None:
    pool = make_pool()
    now_s = teach(pool, "a", 100.0, 30, 0.0)
    now_s = teach(pool, "b", 400.0, 30, now_s)
    now_s = teach(pool, "c", 400.0, 30, now_s)
    primaries = Counter(pool.rank(now_s).order[0] for _ in range(300))
    # "a" wins every draw it is in: two of three pairs.
    assert primaries["a"] > 170
    assert pool.rank(now_s).reason == "p2c"


def test_in_flight_requests_count_against_a_deployment() -> None:
    pool = make_pool(("a", "b"))
    now_s = teach(pool, "a", 100.0, 30, 0.0)
    now_s = teach(pool, "b", 150.0, 30, now_s)
    assert pool.rank(now_s).order[0] == "a"
    for _ in range(3):
        pool.on_attempt_start("a", now_s)
    assert pool.rank(now_s).order[0] == "b"


def test_weights_bias_the_draw() -> None:
    pool = make_pool(("a", "b", "c"), a={"weight": 8.0})
    primaries = Counter(pool.rank(0.0).order[0] for _ in range(600))
    assert primaries["a"] > primaries["b"] + primaries["c"]


def test_lower_priority_only_when_the_better_tier_is_unavailable() -> None:
    routing = RoutingConfig(breaker=BREAKER)
    pool = make_pool(("a", "b", "spare"), routing=routing, spare={"priority": 1})
    now_s = teach(pool, "spare", 10.0, 30, 0.0)  # the fastest, but a spare
    assert all(pool.rank(now_s).order[-1] == "spare" for _ in range(50))
    for name in ("a", "b"):
        for _ in range(3):
            pool.on_failure(name, now_s, is_probe=False, reason="500")
    ranking = pool.rank(now_s)
    assert ranking.order[0] == "spare" and ranking.reason == "priority"


def test_tripped_deployment_is_skipped_and_least_bad_tried_when_all_are() -> None:
    pool = make_pool(("a", "b"), routing=RoutingConfig(breaker=BREAKER))
    for _ in range(3):
        pool.on_failure("a", 0.0, is_probe=False, reason="500")
    assert all(pool.rank(0.1).order == ("b", "a") for _ in range(20))
    pool.on_failure("b", 0.5, is_probe=False, reason="429", retry_after_s=10.0)
    ranking = pool.rank(0.6)
    # Both open: "a" reopens in 0.4 s, "b" in 9.9 s.
    assert ranking.order == ("a", "b") and ranking.reason == "least_bad"


def test_max_concurrency_moves_a_full_deployment_to_the_back() -> None:
    pool = make_pool(("a", "b"), a={"max_concurrency": 1})
    now_s = teach(pool, "a", 10.0, 30, 0.0)
    teach(pool, "b", 500.0, 30, now_s)
    pool.on_attempt_start("a", now_s)
    assert pool.rank(now_s).order == ("b", "a")


def test_affinity_sticks_until_the_home_is_overloaded_or_down() -> None:
    routing = RoutingConfig(breaker=BREAKER, affinity_load_factor=1.25)
    pool = make_pool(("a", "b", "c", "d"), routing=routing)
    key = 987654321
    ranking = pool.rank(0.0, affinity_key=key)
    home = ranking.order[0]
    assert ranking.reason == "affinity"
    assert {pool.rank(0.0, affinity_key=key).order[0] for _ in range(20)} == {home}
    # Overloaded: with 4 in flight at home and none elsewhere, capacity is ceil(1.25*5/4)=2.
    for _ in range(4):
        pool.on_attempt_start(home, 0.0)
    spill = pool.rank(0.0, affinity_key=key).order[0]
    assert spill != home
    for _ in range(4):
        pool.on_attempt_end(home)
    for _ in range(3):
        pool.on_failure(home, 0.0, is_probe=False, reason="500")
    assert pool.rank(0.1, affinity_key=key).order[0] == spill  # down: the next on the ring


def test_hedge_delay_adapts_within_floor_and_ceiling() -> None:
    hedge = HedgeConfig(
        is_enabled=True, quantile=0.95, min_delay_ms=50, max_delay_ms=1000, min_samples=20
    )
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_delay_s("a") == 1.0  # too few samples: the ceiling
    teach(pool, "a", 300.0, 100, 0.0)
    assert pool.hedge_delay_s("a") == pytest.approx(0.3)
    slow = make_pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    teach(slow, "a", 5000.0, 100, 0.0)
    assert slow.hedge_delay_s("a") == pytest.approx(1.0)  # the ceiling
    teach(pool, "b", 5.0, 100, 0.0)
    assert pool.hedge_delay_s("b") == pytest.approx(0.05)  # the floor


def test_hedge_quantile_is_what_the_budget_affords() -> None:
    hedge = HedgeConfig(quantile=0.9, budget=0.05, min_samples=1, max_delay_ms=10_000)
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_quantile() == pytest.approx(0.96)
    now_s = 0.0
    for value in range(1, 101):
        now_s = teach(pool, "a", float(value), 1, now_s)
    assert pool.hedge_delay_s("a") == pytest.approx(0.096)


def test_a_degraded_deployment_is_hedged_on_the_fleets_clock() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=10_000)
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    now_s = teach(pool, "a", 300.0, 50, 0.0)
    teach(pool, "b", 3000.0, 50, now_s)
    assert pool.hedge_delay_s("b") == pytest.approx(0.3)


def test_stragglers_cancelled_after_the_hedge_delay_stay_in_the_quantiles() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=10_000, quantile=0.5)
    pool = make_pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    now_s = teach(pool, "a", 100.0, 10, 0.0)
    for _ in range(30):
        now_s += 0.1
        pool.on_attempt_start("a", now_s)
        pool.on_cancelled("a", 900.0, now_s, is_probe=False)
        pool.on_attempt_end("a")
    assert pool.hedge_delay_s("a") == pytest.approx(0.9)


def test_requests_waiting_past_the_estimate_count_before_any_sample() -> None:
    pool = make_pool(("a", "b"))
    now_s = teach(pool, "a", 100.0, 30, 0.0)
    now_s = teach(pool, "b", 150.0, 30, now_s)
    pool.on_attempt_start("a", now_s)  # this one stalls: a straggler, perhaps...
    assert pool.rank(now_s + 2.0).order[0] == "a"
    pool.on_attempt_start("a", now_s + 0.1)  # ...but a second one too: a stall
    assert pool.rank(now_s + 2.0).order[0] == "b"


def test_an_avoided_deployment_drifts_back_and_is_retried() -> None:
    pool = make_pool(("a", "b"), routing=RoutingConfig(explore_decay_s=30.0))
    now_s = teach(pool, "a", 1500.0, 30, 0.0)  # degraded: avoided from here on
    now_s = teach(pool, "b", 300.0, 30, now_s)
    pool.on_attempt_start("b", now_s)  # b stays busy, a gets no samples
    assert pool.rank(now_s + 1.0).order[0] == "b"
    assert pool.rank(now_s + 120.0).order[0] == "a"  # 4 time constants on: worth a retry


def test_pool_hedges_only_within_budget() -> None:
    pool = make_pool(
        ("a", "b"), routing=RoutingConfig(hedge=HedgeConfig(budget=0.1, budget_burst=0.0))
    )
    for _ in range(20):
        pool.on_request(0.0)
    assert [pool.try_hedge(0.0) for _ in range(3)] == [True, True, False]
    assert pool.snapshot(0.0)["hedges"] == 2


def test_ttft_timeout_per_deployment_overrides_the_model_default() -> None:
    pool = make_pool(
        ("a", "b"), routing=RoutingConfig(ttft_timeout_s=2.0), a={"ttft_timeout_s": 0.5}
    )
    assert pool.ttft_timeout_s("a") == 0.5 and pool.ttft_timeout_s("b") == 2.0


def test_pool_affinity_uses_balanced_homes_and_spills_when_overloaded() -> None:
    pool = make_pool(("a", "b", "c", "d"))
    keys = [random.Random(i).getrandbits(64) for i in range(16)]
    homes = Counter(pool.rank(0.0, affinity_key=k).order[0] for k in keys)
    assert sorted(homes.values()) == [4, 4, 4, 4]
    home = pool.rank(0.0, affinity_key=keys[0]).order[0]
    for _ in range(6):  # capacity: ceil(2.0 * 7 / 4) = 4 in flight
        pool.on_attempt_start(home, 0.0)
    ranking = pool.rank(0.0, affinity_key=keys[0])
    assert ranking.order[0] != home and ranking.reason == "affinity_spill"


def test_cold_start_hedges_on_the_fleets_pooled_samples() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=2000)
    pool = make_pool(("a", "b", "c"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_delay_s("a") == 2.0
    now_s = 0.0
    for name in ("a", "b", "c"):
        now_s = teach(pool, name, 300.0, 4, now_s)  # 12 pooled, 4 each
    assert pool.hedge_delay_s("c") == pytest.approx(0.3)


def test_hedges_do_not_go_where_an_estimate_merely_drifted_back() -> None:
    pool = make_pool(("a", "b", "c"), routing=RoutingConfig(explore_decay_s=30.0))
    now_s = teach(pool, "c", 1500.0, 30, 0.0)  # degraded, then avoided for two minutes
    now_s = teach(pool, "a", 300.0, 30, now_s + 120.0)
    now_s = teach(pool, "b", 300.0, 30, now_s)
    for name in ("a", "b"):
        for _ in range(2):
            pool.on_attempt_start(name, now_s)
    for _ in range(50):
        order = pool.rank(now_s).order
        assert order[-1] == "c" or order[0] == "c"  # explored as a primary, never a rescue


def test_the_second_hedge_waits_a_pooled_quantile_after_the_first() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=2000, second_quantile=0.5)
    pool = make_pool(("a", "b", "c"), routing=RoutingConfig(hedge=hedge))
    assert pool.second_hedge_gap_s() == 2.0  # cold: the ceiling, like the first delay
    now_s = 0.0
    for value in range(1, 101):
        now_s = teach(pool, "a", float(10 * value), 1, now_s)
    assert pool.second_hedge_gap_s() == pytest.approx(0.5)  # the median of 10..1000 ms
    assert pool.hedge_delay_s("a") == pytest.approx(0.96)  # the first: p96
    assert pool.snapshot(now_s)["second_hedge_gap_ms"] == 500.0
    default = make_pool(("a", "b", "c"), routing=RoutingConfig(hedge=HedgeConfig(min_samples=10)))
    for value in range(1, 101):
        now_s = teach(default, "a", float(10 * value), 1, now_s)
    # Unset, the second waits as long after the first as the first waited: p96 of 10..1000.
    assert default.second_hedge_gap_s() == default.hedge_delay_s("a") == pytest.approx(0.96)


def _fleet_with_c_degraded() -> tuple[DeploymentPool, float]:
    pool = make_pool(("a", "b", "c"))
    now_s = teach(pool, "c", 1500.0, 30, 0.0)
    now_s = teach(pool, "a", 300.0, 30, now_s)
    return pool, teach(pool, "b", 300.0, 30, now_s)


def test_the_first_hedge_skips_an_avoided_deployment_when_a_healthy_one_is_untried() -> None:
    pool, now_s = _fleet_with_c_degraded()
    # The ranking, as old as the request, put the degraded c second (a loaded b, say).
    assert pool.hedge_target(("a", "c", "b"), {"a": 1}, now_s) == "b"
    # With no healthy deployment untried, the first hedge goes where it always did.
    assert pool.hedge_target(("a", "c", "b"), {"a": 1, "b": 1}, now_s) == "c"
    assert pool.hedge_target(("a", "b", "c"), {"a": 1, "b": 1, "c": 1}, now_s) is None


def test_the_second_hedge_goes_to_a_third_deployment_else_back_to_the_primarys() -> None:
    pool = make_pool(("a", "b", "c"))
    assert pool.hedge_target(("a", "b", "c"), {"a": 1, "b": 1}, 0.0, level=2) == "c"
    degraded, now_s = _fleet_with_c_degraded()
    # Never to the avoided c: a fresh attempt on the primary's deployment instead.
    tries = {"a": 1, "b": 1}
    assert degraded.hedge_target(("a", "b", "c"), tries, now_s, level=2) == "a"
    assert degraded.hedge_target(("b", "a", "c"), tries, now_s, level=2) == "b"
    two = make_pool(("a", "b"))
    assert two.hedge_target(("b", "a"), {"a": 1, "b": 1}, 0.0, level=2) == "b"


def test_second_hedges_share_the_budget_and_leave_its_last_tenth_to_first_ones() -> None:
    pool = make_pool(
        ("a", "b", "c"), routing=RoutingConfig(hedge=HedgeConfig(budget=0.1, budget_burst=0.0))
    )
    for _ in range(100):
        pool.on_request(0.0)  # room for 10 hedges; second ones may take 9
    assert sum(pool.try_hedge(0.0, level=2) for _ in range(12)) == 9
    assert [pool.try_hedge(0.0) for _ in range(2)] == [True, False]
    snapshot = pool.snapshot(0.0)
    assert snapshot["hedges"] == 10 and snapshot["second_hedges"] == 9
    budget = snapshot["hedge_budget"]
    assert isinstance(budget, dict) and budget["denied"] == 3 + 1

"""The router's choices as pure logic: no sockets, no sleeps, time passed in by hand."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from hasten.routing.affinity import HashRing, bounded_capacity, choose_bounded, prefix_key
from hasten.routing.breaker import BreakerState, CircuitBreaker
from hasten.routing.budget import HedgeBudget
from hasten.routing.estimates import LatencyEstimate, second_largest
from hasten.routing.homes import HomeTable, choose_home
from hasten.routing.pool import DeploymentPool
from hasten.routing.settings import BreakerConfig, DeploymentConfig, HedgeConfig, RoutingConfig


def _pool(
    names: tuple[str, ...] = ("a", "b", "c"),
    *,
    routing: RoutingConfig | None = None,
    seed: int = 1,
    **deployment_fields: dict[str, object],
) -> DeploymentPool:
    deployments = [DeploymentConfig(upstream=n, **deployment_fields.get(n, {})) for n in names]  # type: ignore[arg-type]
    return DeploymentPool(deployments, routing or RoutingConfig(), random.Random(seed))


def _teach(pool: DeploymentPool, name: str, ttft_ms: float, num: int, start_s: float) -> float:
    now_s = start_s
    for _ in range(num):
        now_s += 0.05
        is_probe = pool.on_attempt_start(name, now_s)
        pool.on_first_token(name, ttft_ms, now_s, is_probe=is_probe)
        pool.on_attempt_end(name)
    return now_s


# --- estimates ------------------------------------------------------------------------


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


# --- breaker --------------------------------------------------------------------------

BREAKER = BreakerConfig(max_consecutive_failures=3, min_requests=10, window_size=20, cooldown_s=1.0)


def test_breaker_trips_on_consecutive_failures_then_recovers_through_half_open() -> None:
    breaker = CircuitBreaker(BREAKER)
    for _ in range(3):
        assert breaker.is_available(0.0)
        breaker.record_failure(0.0, is_probe=breaker.on_attempt(0.0), reason="500")
    assert breaker.state(0.5) is BreakerState.OPEN and not breaker.is_available(0.5)
    assert breaker.state(1.0) is BreakerState.HALF_OPEN
    assert breaker.on_attempt(1.0) is True  # the one probe
    assert not breaker.is_available(1.0)  # no second probe while the first runs
    breaker.record_success(1.1, is_probe=True)
    assert breaker.state(1.1) is BreakerState.CLOSED


def test_failed_probe_reopens_with_a_longer_cooldown() -> None:
    breaker = CircuitBreaker(BREAKER)
    for _ in range(3):
        breaker.record_failure(0.0, is_probe=False, reason="500")
    assert breaker.on_attempt(1.0)
    breaker.record_failure(1.0, is_probe=True, reason="500")
    assert breaker.state(2.5) is BreakerState.OPEN  # 2 s now, not 1 s
    assert breaker.state(3.0) is BreakerState.HALF_OPEN


def test_breaker_trips_on_error_rate() -> None:
    breaker = CircuitBreaker(replace(BREAKER, max_consecutive_failures=100, error_rate=0.5))
    for i in range(10):
        if i % 2:
            breaker.record_failure(0.0, is_probe=False, reason="500")
        else:
            breaker.record_success(0.0, is_probe=False)
    assert breaker.state(0.0) is BreakerState.OPEN
    assert "error rate" in breaker.last_trip_reason


def test_retry_after_opens_at_once_for_that_long() -> None:
    breaker = CircuitBreaker(BREAKER)
    breaker.record_failure(0.0, is_probe=False, reason="429", retry_after_s=30.0)
    assert breaker.state(29.0) is BreakerState.OPEN
    assert breaker.state(30.0) is BreakerState.HALF_OPEN


# --- hedge budget ---------------------------------------------------------------------


def test_budget_caps_hedges_at_the_ratio_over_the_window() -> None:
    budget = HedgeBudget(0.05, window_s=10.0)
    for _ in range(100):
        budget.record_request(1.0)
    granted = sum(budget.try_spend(1.0) for _ in range(20))
    assert granted == 5 and budget.num_denied == 15
    # Old traffic leaves the window: no requests, no budget.
    assert not budget.try_spend(30.0)


def test_budget_refuses_when_there_is_no_traffic() -> None:
    assert not HedgeBudget(0.05, window_s=10.0).try_spend(0.0)


# --- affinity -------------------------------------------------------------------------


def _chat(system: str, user: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_prefix_key_ignores_the_last_turn_and_short_prefixes() -> None:
    system = "You are a careful assistant. " * 60
    one = prefix_key(_chat(system, "first"), min_chars=1024, max_chars=32_768)
    two = prefix_key(_chat(system, "second"), min_chars=1024, max_chars=32_768)
    other = prefix_key(_chat(system + "!", "first"), min_chars=1024, max_chars=32_768)
    assert one is not None and one == two and one != other
    assert prefix_key(_chat("short", "x"), min_chars=1024, max_chars=32_768) is None
    prompt = {"prompt": "p" * 2000}
    assert prefix_key(prompt, min_chars=1024, max_chars=4096) == prefix_key(
        {"prompt": "p" * 1500 + "q"}, min_chars=1024, max_chars=4096
    )


def test_ring_spreads_keys_and_moves_only_a_removed_nodes_keys() -> None:
    full = HashRing({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    without_d = HashRing({"a": 1.0, "b": 1.0, "c": 1.0})
    keys = [random.Random(i).getrandbits(64) for i in range(4000)]
    homes = Counter(next(full.walk(k)) for k in keys)
    assert min(homes.values()) > 600  # 1000 each on average
    for key in keys:
        home = next(full.walk(key))
        if home != "d":
            assert next(without_d.walk(key)) == home


def test_bounded_load_spills_to_the_next_node_on_the_ring() -> None:
    ring = HashRing({"a": 1.0, "b": 1.0, "c": 1.0})
    key = 12345
    home, second = list(ring.walk(key))[:2]
    assert choose_bounded(ring, key, {"a": 0, "b": 0, "c": 0}, 1.25) == home
    loads = {"a": 1, "b": 1, "c": 1}
    loads[home] = bounded_capacity(list(loads.values()), 1.25) + 1
    assert choose_bounded(ring, key, loads, 1.25) == second


# --- the pool: P2C, weights, priorities, breakers, affinity, hedge delay ----------------


def test_p2c_prefers_the_faster_deployment() -> None:
    pool = _pool()
    now_s = _teach(pool, "a", 100.0, 30, 0.0)
    now_s = _teach(pool, "b", 400.0, 30, now_s)
    now_s = _teach(pool, "c", 400.0, 30, now_s)
    primaries = Counter(pool.rank(now_s).order[0] for _ in range(300))
    # "a" wins every draw it is in: two of three pairs.
    assert primaries["a"] > 170
    assert pool.rank(now_s).reason == "p2c"


def test_in_flight_requests_count_against_a_deployment() -> None:
    pool = _pool(("a", "b"))
    now_s = _teach(pool, "a", 100.0, 30, 0.0)
    now_s = _teach(pool, "b", 150.0, 30, now_s)
    assert pool.rank(now_s).order[0] == "a"
    for _ in range(3):
        pool.on_attempt_start("a", now_s)
    assert pool.rank(now_s).order[0] == "b"


def test_weights_bias_the_draw() -> None:
    pool = _pool(("a", "b", "c"), a={"weight": 8.0})
    primaries = Counter(pool.rank(0.0).order[0] for _ in range(600))
    assert primaries["a"] > primaries["b"] + primaries["c"]


def test_lower_priority_only_when_the_better_tier_is_unavailable() -> None:
    routing = RoutingConfig(breaker=BREAKER)
    pool = _pool(("a", "b", "spare"), routing=routing, spare={"priority": 1})
    now_s = _teach(pool, "spare", 10.0, 30, 0.0)  # the fastest, but a spare
    assert all(pool.rank(now_s).order[-1] == "spare" for _ in range(50))
    for name in ("a", "b"):
        for _ in range(3):
            pool.on_failure(name, now_s, is_probe=False, reason="500")
    ranking = pool.rank(now_s)
    assert ranking.order[0] == "spare" and ranking.reason == "priority"


def test_tripped_deployment_is_skipped_and_least_bad_tried_when_all_are() -> None:
    pool = _pool(("a", "b"), routing=RoutingConfig(breaker=BREAKER))
    for _ in range(3):
        pool.on_failure("a", 0.0, is_probe=False, reason="500")
    assert all(pool.rank(0.1).order == ("b", "a") for _ in range(20))
    pool.on_failure("b", 0.5, is_probe=False, reason="429", retry_after_s=10.0)
    ranking = pool.rank(0.6)
    # Both open: "a" reopens in 0.4 s, "b" in 9.9 s.
    assert ranking.order == ("a", "b") and ranking.reason == "least_bad"


def test_max_concurrency_moves_a_full_deployment_to_the_back() -> None:
    pool = _pool(("a", "b"), a={"max_concurrency": 1})
    now_s = _teach(pool, "a", 10.0, 30, 0.0)
    _teach(pool, "b", 500.0, 30, now_s)
    pool.on_attempt_start("a", now_s)
    assert pool.rank(now_s).order == ("b", "a")


def test_affinity_sticks_until_the_home_is_overloaded_or_down() -> None:
    routing = RoutingConfig(breaker=BREAKER, affinity_load_factor=1.25)
    pool = _pool(("a", "b", "c", "d"), routing=routing)
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
    pool = _pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_delay_s("a") == 1.0  # too few samples: the ceiling
    _teach(pool, "a", 300.0, 100, 0.0)
    assert pool.hedge_delay_s("a") == pytest.approx(0.3)
    slow = _pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    _teach(slow, "a", 5000.0, 100, 0.0)
    assert slow.hedge_delay_s("a") == pytest.approx(1.0)  # the ceiling
    _teach(pool, "b", 5.0, 100, 0.0)
    assert pool.hedge_delay_s("b") == pytest.approx(0.05)  # the floor


def test_hedge_quantile_is_what_the_budget_affords() -> None:
    hedge = HedgeConfig(quantile=0.9, budget=0.05, min_samples=1, max_delay_ms=10_000)
    pool = _pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_quantile() == pytest.approx(0.96)
    now_s = 0.0
    for value in range(1, 101):
        now_s = _teach(pool, "a", float(value), 1, now_s)
    assert pool.hedge_delay_s("a") == pytest.approx(0.096)


def test_a_degraded_deployment_is_hedged_on_the_fleets_clock() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=10_000)
    pool = _pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    now_s = _teach(pool, "a", 300.0, 50, 0.0)
    _teach(pool, "b", 3000.0, 50, now_s)
    assert pool.hedge_delay_s("b") == pytest.approx(0.3)


def test_stragglers_cancelled_after_the_hedge_delay_stay_in_the_quantiles() -> None:
    hedge = HedgeConfig(min_samples=10, max_delay_ms=10_000, quantile=0.5)
    pool = _pool(("a", "b"), routing=RoutingConfig(hedge=hedge))
    now_s = _teach(pool, "a", 100.0, 10, 0.0)
    for _ in range(30):
        now_s += 0.1
        pool.on_attempt_start("a", now_s)
        pool.on_cancelled("a", 900.0, now_s, is_probe=False)
        pool.on_attempt_end("a")
    assert pool.hedge_delay_s("a") == pytest.approx(0.9)


def test_requests_waiting_past_the_estimate_count_before_any_sample() -> None:
    pool = _pool(("a", "b"))
    now_s = _teach(pool, "a", 100.0, 30, 0.0)
    now_s = _teach(pool, "b", 150.0, 30, now_s)
    pool.on_attempt_start("a", now_s)  # this one stalls: a straggler, perhaps...
    assert pool.rank(now_s + 2.0).order[0] == "a"
    pool.on_attempt_start("a", now_s + 0.1)  # ...but a second one too: a stall
    assert pool.rank(now_s + 2.0).order[0] == "b"


def test_an_avoided_deployment_drifts_back_and_is_retried() -> None:
    pool = _pool(("a", "b"), routing=RoutingConfig(explore_decay_s=30.0))
    now_s = _teach(pool, "a", 1500.0, 30, 0.0)  # degraded: avoided from here on
    now_s = _teach(pool, "b", 300.0, 30, now_s)
    pool.on_attempt_start("b", now_s)  # b stays busy, a gets no samples
    assert pool.rank(now_s + 1.0).order[0] == "b"
    assert pool.rank(now_s + 120.0).order[0] == "a"  # 4 time constants on: worth a retry


def test_pool_hedges_only_within_budget() -> None:
    pool = _pool(("a", "b"), routing=RoutingConfig(hedge=HedgeConfig(budget=0.1)))
    for _ in range(20):
        pool.on_request(0.0)
    assert [pool.try_hedge(0.0) for _ in range(3)] == [True, True, False]
    assert pool.snapshot(0.0)["hedges"] == 2


def test_ttft_timeout_per_deployment_overrides_the_model_default() -> None:
    pool = _pool(("a", "b"), routing=RoutingConfig(ttft_timeout_s=2.0), a={"ttft_timeout_s": 0.5})
    assert pool.ttft_timeout_s("a") == 0.5 and pool.ttft_timeout_s("b") == 2.0


# --- homes: balanced by keys, stable, bounded ------------------------------------------


def test_homes_are_balanced_by_number_of_keys() -> None:
    ring = HashRing({n: 1.0 for n in ("a", "b", "c", "d")})
    weights = dict.fromkeys(("a", "b", "c", "d"), 1.0)
    for trial in range(50):
        table = HomeTable(max_keys=1000)
        keys = [random.Random(trial * 100 + i).getrandbits(64) for i in range(16)]
        homes = Counter(table.place(k, list(ring.walk(k)), weights) for k in keys)
        assert sorted(homes.values()) == [4, 4, 4, 4]
        # A placed key keeps its home; most keys live where the ring puts them.
        assert all(table.place(k, list(ring.walk(k)), weights) == table.lookup(k) for k in keys)
        assert sum(table.lookup(k) == next(ring.walk(k)) for k in keys) >= 6


def test_home_table_is_bounded_and_frees_the_counts_it_forgets() -> None:
    table = HomeTable(max_keys=3)
    weights = {"a": 1.0, "b": 1.0}
    for key in range(5):
        table.place(key, ["a", "b"], weights)
    assert len(table) == 3 and table.lookup(0) is None and table.lookup(4) is not None
    assert table.num_keys("a") + table.num_keys("b") == 3


def test_heavier_deployments_are_home_to_more_keys() -> None:
    assert choose_home(["a", "b"], {"a": 1, "b": 0}, {"a": 3.0, "b": 1.0}, 1.0) == "a"
    assert choose_home(["a", "b"], {"a": 3, "b": 0}, {"a": 3.0, "b": 1.0}, 1.0) == "b"


def test_pool_affinity_uses_balanced_homes_and_spills_when_overloaded() -> None:
    pool = _pool(("a", "b", "c", "d"))
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
    pool = _pool(("a", "b", "c"), routing=RoutingConfig(hedge=hedge))
    assert pool.hedge_delay_s("a") == 2.0
    now_s = 0.0
    for name in ("a", "b", "c"):
        now_s = _teach(pool, name, 300.0, 4, now_s)  # 12 pooled, 4 each
    assert pool.hedge_delay_s("c") == pytest.approx(0.3)


def test_hedges_do_not_go_where_an_estimate_merely_drifted_back() -> None:
    pool = _pool(("a", "b", "c"), routing=RoutingConfig(explore_decay_s=30.0))
    now_s = _teach(pool, "c", 1500.0, 30, 0.0)  # degraded, then avoided for two minutes
    now_s = _teach(pool, "a", 300.0, 30, now_s + 120.0)
    now_s = _teach(pool, "b", 300.0, 30, now_s)
    for name in ("a", "b"):
        for _ in range(2):
            pool.on_attempt_start(name, now_s)
    for _ in range(50):
        order = pool.rank(now_s).order
        assert order[-1] == "c" or order[0] == "c"  # explored as a primary, never a rescue

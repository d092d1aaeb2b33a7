"""Unit tests for hasten.routing.budget.HedgeBudget: hedges capped at a share of traffic."""

from __future__ import annotations

import random

import pytest

from hasten.routing.budget import FleetCounts, HedgeBudget


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


def test_remaining_is_the_windows_headroom() -> None:
    budget = HedgeBudget(0.25, 10.0)
    assert budget.remaining(0.0) == 0.0
    for _ in range(8):
        budget.record_request(0.0)
    assert budget.remaining(0.0) == 2.0
    assert budget.try_spend(0.0)
    assert budget.remaining(0.0) == 1.0
    assert budget.remaining(100.0) == 0.0  # the window has moved on


def test_a_partial_fill_leaves_the_rest_of_the_budget_to_others() -> None:
    budget = HedgeBudget(0.1, window_s=10.0)
    for _ in range(100):
        budget.record_request(1.0)  # room for 10 hedges
    assert sum(budget.try_spend(1.0, max_fill=0.5) for _ in range(8)) == 5
    assert sum(budget.try_spend(1.0) for _ in range(8)) == 5  # the rest, at full fill
    assert budget.num_denied == 3 + 3


def test_a_bucket_starts_full_and_saves_unspent_credit_up_to_its_burst() -> None:
    budget = HedgeBudget(0.05, window_s=10.0, burst=3.0)
    assert [budget.try_spend(0.0) for _ in range(4)] == [True, True, True, False]  # no traffic
    for _ in range(80):
        budget.record_request(1.0)  # earns four hedges, one past the three spent
    assert [budget.try_spend(1.0) for _ in range(2)] == [True, False]
    for _ in range(1000):
        budget.record_request(100.0)  # 50 hedges' worth, saved up to 3
    assert sum(budget.try_spend(100.0) for _ in range(10)) == 3
    snapshot = budget.snapshot(100.0)
    assert snapshot["burst"] == 3.0 and snapshot["credit"] == 0.0
    assert snapshot["requests_total"] == 1080 and snapshot["hedges_total"] == 7


def test_the_starting_burst_is_repaid_before_the_bucket_pays_again() -> None:
    budget = HedgeBudget(0.05, window_s=10.0, burst=20.0)
    assert sum(budget.try_spend(0.0) for _ in range(20)) == 20  # the cold start's burst
    for _ in range(399):
        budget.record_request(1.0)  # the bucket is full again; the hard cap is not
    assert budget.snapshot(1.0)["credit"] == pytest.approx(20 - 0.05)
    assert budget.available(1.0) == budget.remaining(1.0) == 0.0
    assert not budget.try_spend(1.0)
    budget.record_request(1.0)  # 400 requests: 5% of them is the 20 spent
    assert not budget.try_spend(1.0)
    for _ in range(20):
        budget.record_request(1.0)
    assert budget.try_spend(1.0)  # 420 requests: 21 hedges
    assert not budget.try_spend(1.0)


@pytest.mark.parametrize("seed", range(8))
def test_hedges_never_exceed_the_burst_or_the_ratio_of_requests_so_far(seed: int) -> None:
    rng = random.Random(seed)
    burst = rng.choice([1.0, 5.0, 20.0])
    budget = HedgeBudget(0.05, window_s=30.0, burst=burst)
    num_requests = num_hedges = 0
    now_s = 0.0
    for _ in range(5000):
        now_s += rng.expovariate(50.0)
        if rng.random() < 0.8:
            budget.record_request(now_s)
            num_requests += 1
        else:  # hedges wanted in bursts, as when a deployment degrades
            num_hedges += sum(budget.try_spend(now_s) for _ in range(rng.randint(1, 6)))
        assert num_hedges <= max(burst, 0.05 * num_requests) + 1e-9
    assert num_hedges >= 0.8 * 0.05 * num_requests - burst  # and it is spent, not hoarded


def test_a_bucket_keeps_a_reserve_from_a_partial_fill() -> None:
    budget = HedgeBudget(0.05, window_s=10.0, burst=10.0)
    assert sum(budget.try_spend(0.0, max_fill=0.9) for _ in range(12)) == 9
    assert budget.try_spend(0.0)  # the reserved last one
    assert not budget.try_spend(0.0)


# --- shared by a fleet (hasten.fleet.routing feeds apply_fleet) ---------------------------


def test_a_replica_spends_only_its_share_of_the_fleets_headroom() -> None:
    budget = HedgeBudget(0.05, window_s=30.0)
    budget.apply_fleet(FleetCounts(num_requests=1000, num_hedges=0, num_replicas=3, synced_s=0.0))
    # 50 hedges of headroom, three replicas: 16 each (a share is never rounded up).
    assert round(budget.remaining(0.1), 3) == 16.667
    assert sum(budget.try_spend(0.1) for _ in range(30)) == 16
    assert round(budget.remaining(0.1), 3) == 0.667
    for _ in range(20):
        budget.record_request(0.1)  # its own new requests earn 0.05 each
    assert sum(budget.try_spend(0.1) for _ in range(5)) == 1


def test_an_overspent_fleet_is_repaid_before_anyone_hedges_again() -> None:
    budget = HedgeBudget(0.05, window_s=30.0)
    budget.apply_fleet(FleetCounts(100, 10, 2, 0.0))  # 5 hedges over: -2.5 each
    for _ in range(60):
        budget.record_request(0.1)  # earns 3: 0.5 left, not a whole hedge
    assert not budget.try_spend(0.1)
    for _ in range(40):
        budget.record_request(0.1)  # earns 2 more: 2.5
    assert sum(budget.try_spend(0.1) for _ in range(5)) == 2


def test_counts_taken_for_a_sync_still_count_until_it_answers() -> None:
    budget = HedgeBudget(0.1, window_s=30.0)
    budget.apply_fleet(FleetCounts(0, 0, 1, 0.0))
    for _ in range(10):
        budget.record_request(0.1)
    assert budget.try_spend(0.1)
    assert budget.take_counts() == (10, 1)
    assert not budget.try_spend(0.1)  # the pending hedge is still this replica's
    budget.apply_fleet(FleetCounts(10, 1, 1, 0.2))  # the fleet has them now
    assert budget.take_counts() == (0, 0)
    assert not budget.try_spend(0.2)


def test_without_a_fresh_fleet_view_the_replica_decides_from_its_own_window() -> None:
    budget = HedgeBudget(0.05, window_s=30.0)  # 3 s buckets
    for _ in range(100):
        budget.record_request(0.0)
    budget.apply_fleet(FleetCounts(100_000, 0, 1, 0.0))
    assert sum(budget.try_spend(1.0) for _ in range(10)) == 10  # fleet headroom
    # A view older than a bucket is not trusted: the local window (5 hedges, 10 spent).
    assert not budget.try_spend(3.5)
    # Unless the syncs are that far apart: the view says how long it holds.
    budget.apply_fleet(FleetCounts(100_000, 10, 1, 0.0, max_age_s=5.0))
    assert budget.try_spend(3.5)
    budget.apply_fleet(None)
    assert not budget.try_spend(1.0)
    assert budget.snapshot(1.0)["fleet"] is None


def test_in_token_bucket_mode_the_fleet_shares_the_burst() -> None:
    budget = HedgeBudget(0.05, window_s=30.0, burst=6.0)
    budget.apply_fleet(FleetCounts(0, 0, 3, 0.0))
    for _ in range(1000):
        budget.record_request(0.1)  # the bucket fills to 6 / 3 replicas
    assert sum(budget.try_spend(0.1) for _ in range(10)) == 2
    small = HedgeBudget(0.05, window_s=30.0, burst=2.0)
    small.apply_fleet(FleetCounts(0, 0, 5, 0.0))
    for _ in range(1000):
        small.record_request(0.1)
    assert sum(small.try_spend(0.1) for _ in range(10)) == 1  # at least one hedge each


def run_fleet(
    num_replicas: int,
    num_ticks: int,
    num_per_phase: int,
    wants_hedge: list[bool],
    *,
    num_quiet_ticks: int = 0,
    seed: int | None = None,
) -> tuple[list[int], list[int], float]:
    """Replicas syncing in turn with a counter store (one sync each per tick, in a shuffled
    order with ``seed``), every request of a replica in ``wants_hedge`` asking for a hedge
    after ``num_quiet_ticks``; returns requests and hedges per replica and the largest
    fleet excess over 5% seen at any step."""
    budgets = [HedgeBudget(0.05, window_s=1000.0) for _ in range(num_replicas)]
    stored = [0, 0]
    requests, hedges = [0] * num_replicas, [0] * num_replicas
    worst_excess, now_s = 0.0, 0.0
    order = list(range(num_replicas))
    rng = random.Random(seed)
    for tick in range(num_ticks):
        if seed is not None:
            rng.shuffle(order)
        for syncing in order:
            now_s += 0.1 / num_replicas
            num_requests, num_hedges = budgets[syncing].take_counts()
            stored[0] += num_requests
            stored[1] += num_hedges
            budgets[syncing].apply_fleet(FleetCounts(stored[0], stored[1], num_replicas, now_s))
            for i, budget in enumerate(budgets):
                for _ in range(num_per_phase):
                    budget.record_request(now_s)
                    requests[i] += 1
                    if wants_hedge[i] and tick >= num_quiet_ticks:
                        hedges[i] += budget.try_spend(now_s)
            worst_excess = max(worst_excess, sum(hedges) - 0.05 * sum(requests))
    return requests, hedges, worst_excess


def test_replicas_that_all_want_hedges_stay_within_the_fleets_ratio() -> None:
    requests, hedges, worst_excess = run_fleet(3, 100, 20, [True, True, True])
    assert worst_excess <= 0.0
    assert sum(hedges) >= 0.05 * sum(requests) - 3  # and the budget is used, not hoarded


def test_one_replica_may_use_the_headroom_the_others_leave() -> None:
    requests, hedges, worst_excess = run_fleet(3, 100, 20, [True, False, False])
    assert worst_excess <= 0.0
    # Three times its own 5%: what a per-replica budget could never give it.
    assert hedges[0] > 0.14 * requests[0]


def test_after_a_quiet_spell_the_fleet_overshoots_by_a_fraction_of_what_it_saved() -> None:
    # 50 quiet ticks save 50 x 180 requests x 5% = 450 hedges of headroom; then every
    # replica wants a hedge for every request at once, syncing in a different order each tick.
    saved = 50 * 180 * 0.05
    for seed in range(20):
        requests, hedges, worst_excess = run_fleet(
            3, 100, 20, [True, True, True], num_quiet_ticks=50, seed=seed
        )
        # Measured over 200 orders: at most 0.204 of it (median 0.15); 10 replicas: 0.224.
        assert worst_excess <= 0.25 * saved
        assert sum(hedges) <= 0.05 * sum(requests) + 1  # repaid by the end

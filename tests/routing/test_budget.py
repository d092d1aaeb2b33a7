"""Unit tests for hasten.routing.budget.HedgeBudget: hedges capped at a share of traffic."""

from __future__ import annotations

from hasten.routing.budget import HedgeBudget


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
    for _ in range(20):
        budget.record_request(1.0)  # earns one hedge
    assert [budget.try_spend(1.0) for _ in range(2)] == [True, False]
    for _ in range(1000):
        budget.record_request(100.0)  # 50 hedges' worth, saved up to 3
    assert sum(budget.try_spend(100.0) for _ in range(10)) == 3
    snapshot = budget.snapshot(100.0)
    assert snapshot["burst"] == 3.0 and snapshot["credit"] == 0.0


def test_a_bucket_keeps_a_reserve_from_a_partial_fill() -> None:
    budget = HedgeBudget(0.05, window_s=10.0, burst=10.0)
    assert sum(budget.try_spend(0.0, max_fill=0.9) for _ in range(12)) == 9
    assert budget.try_spend(0.0)  # the reserved last one
    assert not budget.try_spend(0.0)

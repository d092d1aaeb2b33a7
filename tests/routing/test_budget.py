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


def test_a_partial_fill_leaves_the_rest_of_the_budget_to_others() -> None:
    budget = HedgeBudget(0.1, window_s=10.0)
    for _ in range(100):
        budget.record_request(1.0)  # room for 10 hedges
    assert sum(budget.try_spend(1.0, max_fill=0.5) for _ in range(8)) == 5
    assert sum(budget.try_spend(1.0) for _ in range(8)) == 5  # the rest, at full fill
    assert budget.num_denied == 3 + 3

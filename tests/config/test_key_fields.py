"""Unit tests for hasten.config.key_fields: the limits and models a key may have."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config.key_fields import MAX_MODELS_PER_KEY, key_limits, key_models, limits_dict
from hasten.config.limits import DEFAULT_BUDGET_PERIOD_S, KeyLimits
from hasten.errors import InvalidKeyField


def test_no_fields_is_unlimited() -> None:
    assert key_limits({}) == KeyLimits()
    assert key_limits({"requests_per_minute": None}).is_unlimited


def test_every_limit_is_read() -> None:
    limits = key_limits(
        {
            "requests_per_minute": 100,
            "tokens_per_minute": 50_000,
            "max_concurrent": 4,
            "budget_usd": 12.5,
            "budget_period": "7d",
        }
    )
    assert limits == KeyLimits(100, 50_000, 4, 12.5, 7 * 86_400.0)


@pytest.mark.parametrize(
    ("spelled", "seconds"),
    [("90m", 5400.0), ("12h", 43_200.0), ("30d", 2_592_000.0), ("2w", 1_209_600.0)],
)
def test_period_spellings(spelled: str, seconds: float) -> None:
    assert key_limits({"budget_usd": 1, "budget_period": spelled}).budget_period_s == seconds


def test_period_in_seconds_and_default() -> None:
    assert key_limits({"budget_usd": 1, "budget_period_s": 3600}).budget_period_s == 3600.0
    assert key_limits({"budget_usd": 1}).budget_period_s == DEFAULT_BUDGET_PERIOD_S


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute"),
        ({"requests_per_minute": 1.5}, "requests_per_minute"),
        ({"requests_per_minute": True}, "requests_per_minute"),
        ({"requests_per_minute": "100"}, "requests_per_minute"),
        ({"tokens_per_minute": 10**13}, "tokens_per_minute"),
        ({"max_concurrent": -1}, "max_concurrent"),
        ({"budget_usd": 0}, "budget_usd"),
        ({"budget_usd": float("inf")}, "budget_usd"),
        ({"budget_usd": float("nan")}, "budget_usd"),
        ({"budget_usd": "5"}, "budget_usd"),
        ({"budget_usd": 1, "budget_period": "month"}, "budget_period"),
        ({"budget_usd": 1, "budget_period": "1s"}, "budget_period"),
        ({"budget_usd": 1, "budget_period": "400d"}, "budget_period"),
        ({"budget_usd": 1, "budget_period_s": 10}, "budget_period_s"),
        ({"budget_usd": 1, "budget_period": "1d", "budget_period_s": 86400}, "budget_period"),
        ({"budget_period": "1d"}, "budget_period"),
        ({"budget_period_s": 86400}, "budget_period_s"),
        ({"rpm": 5}, "rpm"),
    ],
)
def test_bad_limits_name_their_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidKeyField) as caught:
        key_limits(values)
    assert caught.value.field == field


def test_models() -> None:
    assert key_models(None) is None
    assert key_models(["a", "b", "a"]) == frozenset({"a", "b"})
    assert key_models(["a", "*"]) is None  # "*" allows every model


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("gpt-4o", "models"),
        ([], "models"),
        (["ok", ""], "models[1]"),
        (["ok", 3], "models[1]"),
        (["x" * 257], "models[0]"),
        (["bad\nname"], "models[0]"),
        (["m"] * (MAX_MODELS_PER_KEY + 1), "models"),
    ],
)
def test_bad_models(value: object, field: str) -> None:
    with pytest.raises(InvalidKeyField) as caught:
        key_models(value)
    assert caught.value.field == field


def test_limits_dict_shows_the_period_only_with_a_budget() -> None:
    assert limits_dict(KeyLimits(requests_per_minute=5))["budget_period_s"] is None
    shown = limits_dict(KeyLimits(budget_usd=2.0, budget_period_s=3600.0))
    assert shown["budget_usd"] == 2.0
    assert shown["budget_period_s"] == 3600.0

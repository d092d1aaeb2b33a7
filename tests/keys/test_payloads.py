"""Unit tests for hasten.keys.payloads: the admin API's bodies and what it shows."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config.limits import KeyLimits
from hasten.errors import InvalidRequest
from hasten.keys.payloads import creation, patch, shown, with_secret
from hasten.keys.record import new_record


def test_creation_reads_every_field() -> None:
    fields = creation(
        {
            "tenant": "team-a",
            "name": "ci bot",
            "models": ["m1", "m2"],
            "limits": {"requests_per_minute": 100, "budget_usd": 5, "budget_period": "1d"},
        }
    )
    assert (fields.tenant, fields.name, fields.models) == (
        "team-a",
        "ci bot",
        frozenset({"m1", "m2"}),
    )
    assert fields.limits == KeyLimits(
        requests_per_minute=100, budget_usd=5.0, budget_period_s=86_400.0
    )


def test_creation_defaults() -> None:
    fields = creation({"tenant": "t"})
    assert (fields.name, fields.models, fields.limits) == ("", None, KeyLimits())


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "tenant", "missing_required_parameter"),
        ({"tenant": ""}, "tenant", "invalid_value"),
        ({"tenant": "a b"}, "tenant", "invalid_value"),
        ({"tenant": "x" * 65}, "tenant", "invalid_value"),
        ({"tenant": 5}, "tenant", "invalid_value"),
        ({"tenant": "t", "name": 5}, "name", "invalid_value"),
        ({"tenant": "t", "name": "x" * 129}, "name", "invalid_value"),
        ({"tenant": "t", "name": "a\x00b"}, "name", "invalid_value"),
        ({"tenant": "t", "models": []}, "models", "invalid_value"),
        ({"tenant": "t", "models": "m"}, "models", "invalid_value"),
        ({"tenant": "t", "limits": [1]}, "limits", "invalid_type"),
        (
            {"tenant": "t", "limits": {"requests_per_minute": 0}},
            "limits.requests_per_minute",
            "invalid_value",
        ),
        ({"tenant": "t", "limits": {"rpm": 1}}, "limits.rpm", "invalid_value"),
        ({"tenant": "t", "secret": "mine"}, "secret", "unknown_parameter"),
    ],
)
def test_creation_errors(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        creation(body)
    assert (caught.value.param, caught.value.code, caught.value.status_code) == (param, code, 400)


def test_patch_leaves_out_what_is_not_given() -> None:
    fields = patch({"name": "renamed"})
    assert fields.name == "renamed" and fields.limits is None and not fields.has_models
    fields = patch({"models": None, "limits": {}})
    assert fields.has_models and fields.models is None and fields.limits == KeyLimits()


@pytest.mark.parametrize("body", [{}, {"tenant": "other"}, {"limits": 5}])
def test_patch_errors(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        patch(body)


def test_shown_never_carries_the_secret_or_its_digest() -> None:
    record, secret = new_record("t", "n", frozenset({"b", "a"}), KeyLimits(3), now_s=12.9)
    view = shown(record)
    text = repr(view)
    assert secret not in text and record.secret_sha256.hex() not in text
    assert view["secret_hint"] == "hsk_..." + secret[-4:]
    assert (view["id"], view["created"], view["models"]) == (record.key_id, 12, ["a", "b"])
    assert view["limits"]["requests_per_minute"] == 3 and view["revoked"] is False
    assert with_secret(record, secret)["secret"] == secret

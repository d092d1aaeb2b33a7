from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache.decision import (
    CacheDecision,
    CacheDirectives,
    decide,
    is_deterministic,
    parse_cache_control,
)
from hasten.config.cache_policy import ModelCachePolicy

DETERMINISTIC: dict[str, Any] = {"messages": [], "temperature": 0}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, CacheDirectives()),
        ("", CacheDirectives()),
        ("no-cache", CacheDirectives(is_no_cache=True)),
        ("No-Store", CacheDirectives(is_no_store=True)),
        ("NO-CACHE, no-store", CacheDirectives(is_no_cache=True, is_no_store=True)),
        ("max-age=60", CacheDirectives(max_age_s=60.0)),
        ('max-age="30"', CacheDirectives(max_age_s=30.0)),
        ("  MAX-AGE = 5 ,no-cache", CacheDirectives(is_no_cache=True, max_age_s=5.0)),
        ("max-age=0", CacheDirectives(max_age_s=0.0)),
        ("max-age=60, max-age=10", CacheDirectives(max_age_s=10.0)),
        ("max-age=abc", CacheDirectives()),
        ("max-age=-5", CacheDirectives()),
        ("max-age=inf, max-age=nan", CacheDirectives()),
        ("max-age", CacheDirectives()),
        ("private, must-revalidate, ,,, =, foo=bar", CacheDirectives()),
        ('no-cache="set-cookie"', CacheDirectives(is_no_cache=True)),
        ("\x00garbage\xff;;", CacheDirectives()),
    ],
)
def test_parse_cache_control(header: str | None, expected: CacheDirectives) -> None:
    assert parse_cache_control(header) == expected


@settings(deadline=None)
@given(st.text())
def test_parse_cache_control_never_raises(header: str) -> None:
    directives = parse_cache_control(header)
    assert directives.max_age_s is None or directives.max_age_s >= 0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, False),  # OpenAI defaults to temperature 1
        ({"temperature": None}, False),
        ({"temperature": 0}, True),
        ({"temperature": 0.0}, True),
        ({"temperature": 0.7}, False),
        ({"temperature": 0.7, "seed": 42}, True),
        ({"seed": 0}, True),
        ({"seed": None}, False),
        ({"temperature": 0, "n": 3}, True),
        ({"temperature": 0.5, "n": 3, "seed": 1}, False),
        ({"n": 2, "seed": 1}, False),
        ({"temperature": 1, "n": 1, "seed": 1}, True),
        ({"temperature": "0"}, False),
        ({"temperature": False}, False),
    ],
)
def test_is_deterministic(body: dict[str, Any], expected: bool) -> None:
    assert is_deterministic(body) is expected


def test_decide_cacheable() -> None:
    decision = decide(DETERMINISTIC, ModelCachePolicy(ttl_s=60.0), CacheDirectives())
    assert decision == CacheDecision(is_lookup=True, is_store=True, reason="cacheable", ttl_s=60.0)


def test_decide_disabled() -> None:
    decision = decide(DETERMINISTIC, ModelCachePolicy(is_enabled=False), CacheDirectives())
    assert (decision.is_lookup, decision.is_store, decision.reason) == (False, False, "disabled")


def test_decide_non_deterministic() -> None:
    decision = decide({"messages": []}, ModelCachePolicy(), CacheDirectives())
    assert (decision.is_lookup, decision.is_store) == (False, False)
    assert decision.reason == "non-deterministic"


def test_decide_non_deterministic_allowed_by_policy() -> None:
    policy = ModelCachePolicy(is_deterministic_only=False)
    decision = decide({"messages": [], "temperature": 1.2}, policy, CacheDirectives())
    assert (decision.is_lookup, decision.is_store) == (True, True)


@pytest.mark.parametrize(
    ("header", "is_lookup", "is_store", "reason"),
    [
        ("no-cache", False, True, "no-cache"),
        ("no-store", True, False, "no-store"),
        ("no-cache, no-store", False, False, "no-cache, no-store"),
        ("max-age=0", False, True, "max-age=0"),
        ("max-age=30", True, True, "cacheable"),
    ],
)
def test_decide_honours_directives(
    header: str, is_lookup: bool, is_store: bool, reason: str
) -> None:
    decision = decide(DETERMINISTIC, ModelCachePolicy(), parse_cache_control(header))
    assert (decision.is_lookup, decision.is_store, decision.reason) == (is_lookup, is_store, reason)


def test_decide_carries_max_age() -> None:
    decision = decide(DETERMINISTIC, ModelCachePolicy(), parse_cache_control("max-age=30"))
    assert decision.max_age_s == 30.0


def test_policy_is_frozen() -> None:
    policy = ModelCachePolicy()
    with pytest.raises(AttributeError):
        policy.ttl_s = 1.0  # type: ignore[misc]
    assert (policy.is_enabled, policy.is_deterministic_only, policy.ttl_s) == (True, True, 3600.0)


@given(
    st.sampled_from([0, 0.0, 0.7, None, 1]),
    st.sampled_from([None, 7]),
    st.floats(min_value=1.0, max_value=1e6),
    st.booleans(),
)
def test_no_header_decides_as_empty_directives(
    temperature: float | None, seed: int | None, ttl_s: float, is_enabled: bool
) -> None:
    # A request without Cache-Control takes a shortcut; it must decide as the full rule does.
    body = {"temperature": temperature, "seed": seed}
    policy = ModelCachePolicy(is_enabled=is_enabled, ttl_s=ttl_s)
    assert decide(body, policy, parse_cache_control(None)) == decide(
        body, policy, CacheDirectives()
    )

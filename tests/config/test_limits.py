"""KeyLimits as a dictionary key: tickets and hit limits are found by equal limits."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from hasten.config.limits import KeyLimits

_counts = st.none() | st.integers(min_value=0, max_value=10**9)
_limits = st.builds(
    KeyLimits,
    requests_per_minute=_counts,
    tokens_per_minute=_counts,
    max_concurrent=_counts,
    budget_usd=st.none() | st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    budget_period_s=st.floats(min_value=1.0, max_value=1e9, allow_nan=False),
)


@given(_limits, _limits)
def test_equal_limits_hash_alike_and_different_ones_stay_apart(a: KeyLimits, b: KeyLimits) -> None:
    twin = KeyLimits(**{f.name: getattr(a, f.name) for f in dataclasses.fields(a) if f.init})
    assert twin == a and hash(twin) == hash(a)
    assert {a: 1, twin: 2} == {a: 2}
    fields_a = tuple(getattr(a, f.name) for f in dataclasses.fields(a) if f.init)
    fields_b = tuple(getattr(b, f.name) for f in dataclasses.fields(b) if f.init)
    assert (a == b) == (fields_a == fields_b)
    if a != b:
        assert len({a: 1, b: 2}) == 2


def test_the_kept_hash_is_not_a_field_of_the_limits() -> None:
    limits = KeyLimits(requests_per_minute=5)
    assert "_hash" not in repr(limits)
    assert dataclasses.replace(limits, requests_per_minute=6) == KeyLimits(requests_per_minute=6)
    assert hash(dataclasses.replace(limits, max_concurrent=2)) == hash(
        KeyLimits(requests_per_minute=5, max_concurrent=2)
    )

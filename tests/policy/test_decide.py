"""What a parameter policy does to one body, and how a model's and a tenant's combine."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.errors import InvalidRequest
from hasten.policy import ParamPolicy, apply_policy, combine
from hasten.policy.decide import Cap, EffectivePolicy


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def effective(model: ParamPolicy | None = None, tenant: ParamPolicy | None = None) -> Any:
    policy = combine(model, tenant)
    assert policy is not None
    return policy


def actions(body: dict[str, Any], policy: EffectivePolicy) -> tuple[str, ...]:
    applied = apply_policy(body, policy)
    return () if applied is None else applied.actions


def test_default_max_tokens_only_when_the_client_set_no_limit() -> None:
    policy = effective(ParamPolicy(default_max_tokens=256))
    applied = apply_policy(chat(), policy)
    assert applied is not None
    assert applied.body["max_tokens"] == 256
    assert applied.actions == ("max_tokens=256(default)",)
    assert apply_policy(chat(max_tokens=10), policy) is None
    assert apply_policy(chat(max_completion_tokens=10), policy) is None
    assert actions(chat(max_tokens=None), policy) == ("max_tokens=256(default)",)


def test_cap_clamps_both_token_fields() -> None:
    policy = effective(ParamPolicy(max_tokens_cap=1024))
    applied = apply_policy(chat(max_tokens=4096, max_completion_tokens=2000), policy)
    assert applied is not None
    assert applied.body["max_tokens"] == 1024 and applied.body["max_completion_tokens"] == 1024
    assert applied.actions == (
        "max_tokens 4096->1024(cap)",
        "max_completion_tokens 2000->1024(cap)",
    )
    assert applied.header == b"max_tokens 4096->1024(cap), max_completion_tokens 2000->1024(cap)"
    assert apply_policy(chat(max_tokens=1024), policy) is None


def test_reject_mode_names_the_param() -> None:
    policy = effective(ParamPolicy(max_tokens_cap=100, max_n=2, is_reject_on_exceed=True))
    with pytest.raises(InvalidRequest) as refused:
        apply_policy(chat(max_completion_tokens=101), policy)
    assert refused.value.status_code == 400
    assert refused.value.param == "max_completion_tokens"
    assert refused.value.headers["x-hasten-policy"] == "max_completion_tokens 101>100(reject)"
    with pytest.raises(InvalidRequest) as too_many:
        apply_policy(chat(n=3), policy)
    assert too_many.value.param == "n"
    assert apply_policy(chat(max_tokens=100, n=2), policy) is None


def test_n_cap() -> None:
    policy = effective(ParamPolicy(max_n=2))
    assert actions(chat(n=5), policy) == ("n 5->2(cap)",)
    assert apply_policy(chat(), policy) is None  # no n is one choice


def test_default_stop_only_when_the_client_sent_none() -> None:
    policy = effective(ParamPolicy(default_stop=("\n\n", "END")))
    applied = apply_policy(chat(), policy)
    assert applied is not None and applied.body["stop"] == ["\n\n", "END"]
    assert applied.actions == ("stop(default)",)
    assert actions(chat(stop=[]), policy) == ("stop(default)",)
    assert apply_policy(chat(stop="x"), policy) is None
    assert apply_policy(chat(stop=["y"]), policy) is None


def test_drop_and_set() -> None:
    policy = effective(
        ParamPolicy(drop=("logit_bias", "user"), set_fields={"temperature": 0, "top_p": 1})
    )
    applied = apply_policy(chat(logit_bias={"1": 5}, temperature=0.9), policy)
    assert applied is not None
    assert "logit_bias" not in applied.body and applied.body["temperature"] == 0
    assert applied.actions == ("drop logit_bias", "set temperature=0", "set top_p=1")
    # A field already at its value is not "set": nothing changed.
    assert apply_policy(chat(temperature=0, top_p=1), policy) is None
    # By type: `true` would reach the upstream as something else than 1.
    flagged = effective(ParamPolicy(set_fields={"logprobs": True}))
    assert actions(chat(logprobs=1), flagged) == ("set logprobs=true",)


def test_long_set_values_are_named_but_not_shown() -> None:
    policy = effective(ParamPolicy(set_fields={"metadata": {"team": "x" * 40}, "tag": "é"}))
    assert actions(chat(), policy) == ("set metadata", "set tag")


def test_the_client_body_is_never_mutated() -> None:
    body = chat(max_tokens=4096, logit_bias={"1": 1})
    before = {**body}
    policy = effective(ParamPolicy(max_tokens_cap=10, drop=("logit_bias",)))
    applied = apply_policy(body, policy)
    assert applied is not None and applied.body is not body
    assert body == before


def test_caps_stricter_wins_and_reject_belongs_to_its_cap() -> None:
    model = ParamPolicy(max_tokens_cap=4096, is_reject_on_exceed=True, max_n=4)
    tenant = ParamPolicy(max_tokens_cap=256, max_n=8)
    policy = effective(model, tenant)
    assert policy.max_tokens == Cap(256, reject_above=4096)
    assert policy.n == Cap(4, reject_above=4)
    # Above the tenant's clamping cap only: clamped; above the model's hard limit: refused.
    assert actions(chat(max_tokens=1000), policy) == ("max_tokens 1000->256(cap)",)
    with pytest.raises(InvalidRequest):
        apply_policy(chat(max_tokens=5000), policy)


def test_defaults_tenant_over_model_and_never_above_the_cap() -> None:
    model = ParamPolicy(default_max_tokens=100, default_stop=("a",), max_tokens_cap=500)
    tenant = ParamPolicy(default_max_tokens=2000, default_stop=("b",))
    policy = effective(model, tenant)
    assert policy.default_max_tokens == 500
    assert policy.default_stop == ("b",)
    assert effective(model, ParamPolicy(max_n=1)).default_max_tokens == 100


def test_set_and_drop_both_apply_tenant_last() -> None:
    model = ParamPolicy(drop=("user",), set_fields={"temperature": 0, "seed": 1})
    tenant = ParamPolicy(drop=("seed",), set_fields={"temperature": 0.5, "user": "t"})
    policy = effective(model, tenant)
    applied = apply_policy(chat(user="u", seed=9, temperature=1), policy)
    assert applied is not None
    assert applied.body == chat(user="t", temperature=0.5)


def test_an_empty_policy_combines_to_none() -> None:
    assert combine(None, None) is None
    assert combine(ParamPolicy(), ParamPolicy()) is None


# --- properties -------------------------------------------------------------------------

counts = st.integers(min_value=1, max_value=10_000)
# What a TOML `set` value can be: 64-bit integers, finite floats, strings, lists, tables.
scalars = st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
field_names = st.sampled_from(["logit_bias", "user", "temperature", "top_p", "seed", "x"])


@st.composite
def policies(draw: st.DrawFn) -> ParamPolicy:
    cap = draw(st.none() | counts)
    default = draw(st.none() | counts)
    if cap is not None and default is not None:
        default = min(default, cap)
    dropped = draw(st.lists(field_names, max_size=3, unique=True))
    set_fields = draw(
        st.dictionaries(field_names.filter(lambda n: n not in dropped), json_values, max_size=3)
    )
    return ParamPolicy(
        default_max_tokens=default,
        max_tokens_cap=cap,
        max_n=draw(st.none() | counts),
        default_stop=tuple(draw(st.lists(st.text(min_size=1), max_size=4))),
        drop=tuple(dropped),
        set_fields=set_fields,
    )


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = chat()
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = draw(st.none() | counts)
        if value is not None:
            body[name] = value
    stop = draw(st.none() | st.text() | st.lists(st.text(), max_size=4))
    if stop is not None:
        body["stop"] = stop
    body.update(draw(st.dictionaries(field_names, json_values, max_size=3)))
    return body


@given(bodies(), policies(), policies())
def test_a_capped_value_never_exceeds_the_cap(
    body: dict[str, Any], model: ParamPolicy, tenant: ParamPolicy
) -> None:
    policy = combine(model, tenant)
    if policy is None:
        return
    applied = apply_policy(body, policy)
    out = body if applied is None else applied.body
    if policy.max_tokens is not None:
        for name in ("max_tokens", "max_completion_tokens"):
            assert out.get(name) is None or out[name] <= policy.max_tokens.limit
    if policy.n is not None:
        assert out.get("n", 1) <= policy.n.limit


@given(bodies(), policies(), policies())
def test_applying_twice_equals_once(
    body: dict[str, Any], model: ParamPolicy, tenant: ParamPolicy
) -> None:
    policy = combine(model, tenant)
    if policy is None:
        return
    applied = apply_policy(body, policy)
    once = body if applied is None else applied.body
    assert apply_policy(once, policy) is None


@given(bodies())
def test_an_empty_policy_changes_nothing(body: dict[str, Any]) -> None:
    assert apply_policy(body, EffectivePolicy()) is None


@given(bodies(), st.integers(min_value=1, max_value=100), st.booleans())
def test_reject_refuses_exactly_the_values_above_the_cap(
    body: dict[str, Any], cap: int, is_reject: bool
) -> None:
    policy = effective(ParamPolicy(max_tokens_cap=cap, is_reject_on_exceed=is_reject))
    is_above = any((body.get(n) or 0) > cap for n in ("max_tokens", "max_completion_tokens"))
    if is_reject and is_above:
        with pytest.raises(InvalidRequest):
            apply_policy(body, policy)
    else:
        assert (apply_policy(body, policy) is not None) == is_above

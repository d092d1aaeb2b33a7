from __future__ import annotations

import json
import random
from types import MappingProxyType
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache.request_key import cache_key, request_key, with_headers
from hasten.errors import HastenError
from tests.support.strategies import any_json_values

_EXCLUDED = ("stream", "stream_options", "user")

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=24,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.text()}
    ),
    min_size=1,
    max_size=4,
)
bodies = st.fixed_dictionaries(
    {"model": st.text(max_size=8), "messages": messages},
    optional={
        "temperature": st.floats(0, 2) | st.integers(0, 2),
        "top_p": st.floats(0, 1),
        "seed": st.integers(0, 2**31),
        "n": st.integers(1, 4),
        "max_tokens": st.integers(1, 4096),
        "stop": st.lists(st.text(max_size=4), max_size=3) | st.text(max_size=4),
        "logprobs": st.booleans(),
        "response_format": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
        "tools": st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "x_unknown": json_values,
    },
)


def key(body: dict[str, Any], **overrides: str) -> str:
    params = {"endpoint": "chat", "model": "gpt-test", "tenant": "t1", **overrides}
    return cache_key(body, **params)


def shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def floats_for_ints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: floats_for_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_for_ints(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in leaf_paths(v, (*prefix, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in leaf_paths(v, (*prefix, i))]
    return [prefix]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def get_path(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def shuffled_fields(body: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """``body`` with its own fields and each message's in another order, nothing else."""
    items = list(body.items())
    rnd.shuffle(items)
    moved = dict(items)
    moved["messages"] = [shuffled(message, rnd) for message in body["messages"]]
    return moved


@settings(deadline=None)
@given(body=bodies, rnd=st.randoms(use_true_random=False))
def test_key_ignores_the_order_of_fields_and_of_message_fields(
    body: dict[str, Any], rnd: random.Random
) -> None:
    assert key(shuffled_fields(body, rnd)) == key(body)


def _schema_format(properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {"type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": schema}}


def test_key_keeps_the_order_of_a_json_schemas_properties() -> None:
    # Strict structured output writes the properties in the schema's order: {b, a} and
    # {a, b} are two answers.
    base: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    string = {"type": "string"}
    b_first = key({**base, "response_format": _schema_format({"b": string, "a": string})})
    a_first = key({**base, "response_format": _schema_format({"a": string, "b": string})})
    assert b_first != a_first
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    tools_ab = [{**tool, "function": {"name": "f", "parameters": {"a": 1, "b": 2}}}]
    tools_ba = [{**tool, "function": {"name": "f", "parameters": {"b": 2, "a": 1}}}]
    assert key({**base, "tools": tools_ab}) != key({**base, "tools": tools_ba})


def test_headers_that_can_change_the_answer_vary_the_key() -> None:
    request = request_key({"messages": []}, endpoint="chat", model="m")
    assert with_headers(request, ()) == request
    org_a = with_headers(request, (("openai-organization", "org-a"),))
    org_b = with_headers(request, (("openai-organization", "org-b"),))
    project = with_headers(request, (("openai-project", "org-a"),))
    assert len({request, org_a, org_b, project}) == 4
    both = (("openai-beta", "assistants=v2"), ("openai-project", "p"))
    assert with_headers(request, both) == with_headers(request, both[::-1])


@settings(deadline=None)
@given(body=bodies)
def test_key_ignores_json_formatting(body: dict[str, Any]) -> None:
    reformatted = orjson.loads(json.dumps(body, indent=3, separators=(" ,  ", " :  ")))
    assert key(reformatted) == key(body)


@settings(deadline=None)
@given(body=bodies)
def test_key_treats_integral_floats_as_ints(body: dict[str, Any]) -> None:
    assert key(floats_for_ints(body)) == key(body)


@settings(deadline=None)
@given(body=bodies, stream=st.booleans(), user=st.text(), include_usage=st.booleans())
def test_key_ignores_transport_fields(
    body: dict[str, Any], stream: bool, user: str, include_usage: bool
) -> None:
    noisy = {
        **body,
        "stream": stream,
        "user": user,
        "stream_options": {"include_usage": include_usage},
    }
    assert key(noisy) == key(body)


@settings(deadline=None)
@given(body=bodies, data=st.data())
def test_key_changes_when_any_leaf_changes(body: dict[str, Any], data: st.DataObject) -> None:
    paths = [p for p in leaf_paths(body) if p and p[0] != "model"]
    path = data.draw(st.sampled_from(paths))
    old = get_path(body, path)
    new = old + " " if isinstance(old, str) else ["mutated", old]
    assert key(replaced(body, path, new)) != key(body)


@settings(deadline=None)
@given(body=bodies, name=st.text(min_size=1, max_size=8), value=json_values)
def test_key_changes_when_a_field_is_added(body: dict[str, Any], name: str, value: Any) -> None:
    if name in body or name in _EXCLUDED:
        return
    assert key({**body, name: value}) != key(body)


@settings(deadline=None)
@given(body=bodies)
def test_key_depends_on_model_tenant_and_endpoint(body: dict[str, Any]) -> None:
    base = key(body)
    assert key(body, model="other-model") != base
    assert key(body, tenant="t2") != base
    assert key(body, endpoint="completions") != base


def test_resolved_model_replaces_body_model() -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    assert key({**body, "model": "alias"}) == key({**body, "model": "gpt-4o"}) == key(body)


def test_examples() -> None:
    base: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": 1}}}],
    }
    assert key(base) == key({**base, "temperature": 0.0})
    assert key(base) == key({**base, "temperature": -0.0})
    assert key(base) != key({**base, "temperature": 0.5})
    assert key(base) != key({**base, "messages": [{"role": "user", "content": "hi "}]})
    assert key(base) != key({**base, "messages": [{"role": "system", "content": "hi"}]})
    assert key(base) != key({**base, "seed": 1})
    assert key(base) != key({**base, "n": 2})
    assert key(base) != key({**base, "logprobs": True})
    assert key(base) != key({**base, "stop": ["\n"]})
    assert key(base) != key({**base, "response_format": {"type": "json_object"}})
    assert key(base) != key({**base, "tool_choice": "required"})
    assert key({**base, "seed": 1}) != key({**base, "seed": True})
    assert key({**base, "x": None}) != key(base)


def test_key_is_a_hex_digest() -> None:
    digest = key({"messages": []})
    assert len(digest) == 64
    int(digest, 16)


def test_huge_numbers_do_not_break_the_key() -> None:
    assert key({"x": 10**30}) != key({"x": 10**30 + 1})
    assert key({"x": 1e300}) == key({"x": 1e300})
    assert key({"x": 2**70}) == key({"x": float(2**70)})


def test_other_mapping_and_sequence_types_match_plain_json() -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b"], "x": 1.0}
    exotic = {
        "messages": (MappingProxyType({"role": "user", "content": "hi"}),),
        "stop": ("a", "b"),
        "x": 1,
    }
    assert key(exotic) == key(plain)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(st.text(), any_json_values, max_size=8))
def test_the_cache_key_is_defined_for_any_json_body(body: dict[str, Any]) -> None:
    try:
        key = cache_key(body, endpoint="chat", model="m", tenant="t")
    except HastenError:
        return  # e.g. an integer orjson cannot write: a 400, never a 500
    assert key == cache_key(dict(body), endpoint="chat", model="m", tenant="t")
    assert key != cache_key(body, endpoint="chat", model="m", tenant="other")

"""Unit tests for hasten.proxy.validation: 400s that name the offending ``param``, and any
bytes at all answered with a body or the gateway's own 400."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.errors import HastenError, InvalidRequest
from hasten.proxy.validation import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    OFF_LOOP_BYTES,
    check_chat,
    check_completion,
    check_embedding,
    check_num_items,
    off_loop,
    parse_body,
)
from tests.support.strategies import any_json_values

Check = Callable[[dict[str, Any]], None]


def _chat(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
    }
    body.update(overrides)
    return body


def _param_of(check: Check, body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        check(body)
    assert info.value.status_code == 400
    assert info.value.error_type == "invalid_request_error"
    return info.value


# --- valid bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        _chat(),
        _chat(stream=True, stream_options={"include_usage": True}),
        _chat(temperature=0, top_p=1, n=2, max_tokens=16, seed=7, stop=["\n"]),
        _chat(temperature=0.7, max_completion_tokens=5, stop="END"),
        _chat(temperature=None, n=None, stream=None, max_tokens=None),
        _chat(tools=[{"type": "function", "function": {"name": "f"}}]),
        _chat(
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
            ]
        ),
        _chat(
            some_future_field={"x": 1},
            user="u-1",
            logit_bias={"50256": -100},
            response_format={"type": "json_object"},
        ),
    ],
)
def test_valid_chat_bodies_accepted(body: dict[str, Any]) -> None:
    check_chat(body)


def test_valid_completion_and_embedding_bodies() -> None:
    check_completion({"model": "m", "prompt": "once upon", "max_tokens": 3, "extra": True})
    check_completion({"model": "m", "prompt": ["a", "b"], "stream": False})
    check_completion({"model": "m", "prompt": ""})
    check_embedding({"model": "m", "input": "text", "encoding_format": "float"})
    check_embedding({"model": "m", "input": ["a", "b"], "dimensions": 8})
    check_embedding({"model": "m", "input": [1, 2, 3]})


def test_validation_does_not_mutate_body() -> None:
    body = _chat(temperature=0.5, unknown={"nested": [1]})
    snapshot = repr(body)
    check_chat(body)
    assert repr(body) == snapshot


# --- model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [check_chat, check_completion, check_embedding])
def test_missing_model(check: Check) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "prompt": "x", "input": "x"}
    error = _param_of(check, body)
    assert error.param == "model"
    assert error.code == "missing_required_parameter"
    assert "'model'" in error.message


@pytest.mark.parametrize("check", [check_chat, check_completion, check_embedding])
@pytest.mark.parametrize("model", ["", 3, None, ["gpt"], True])
def test_invalid_model(check: Check, model: Any) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "x"}],
        "prompt": "x",
        "input": "x",
    }
    error = _param_of(check, body)
    assert error.param == "model"
    assert error.code == "invalid_type"


# --- messages -------------------------------------------------------------------------------


def test_missing_messages() -> None:
    error = _param_of(check_chat, {"model": "m"})
    assert error.param == "messages"
    assert error.code == "missing_required_parameter"


@pytest.mark.parametrize("messages", [[], "hi", {"role": "user"}, None, 5])
def test_invalid_messages(messages: Any) -> None:
    error = _param_of(check_chat, _chat(messages=messages))
    assert error.param == "messages"
    assert error.code == "invalid_type"


def test_message_not_an_object() -> None:
    error = _param_of(check_chat, _chat(messages=[{"role": "user", "content": "x"}, "hello"]))
    assert error.param == "messages[1]"


@pytest.mark.parametrize("role", [None, 3, ["user"]])
def test_invalid_role_names_index(role: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "x"}, {"content": "y"}]
    if role is not None:
        messages[1]["role"] = role
    error = _param_of(check_chat, _chat(messages=messages))
    assert error.param == "messages[1].role"


def test_invalid_content_names_index() -> None:
    messages = [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]
    error = _param_of(check_chat, _chat(messages=messages))
    assert error.param == "messages[1].content"


def test_first_bad_message_reported() -> None:
    messages = [{"role": "user", "content": "x"}, {"role": 1}, {"role": 2}]
    assert _param_of(check_chat, _chat(messages=messages)).param == "messages[1].role"


# --- sampling parameters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("temperature", "hot"),
        ("temperature", True),
        ("temperature", [0]),
        ("top_p", "1"),
        ("stream", "yes"),
        ("stream", 1),
        ("stream", 0),
        ("n", 0),
        ("n", -1),
        ("n", 1.5),
        ("n", "2"),
        ("n", True),
        ("max_tokens", 0),
        ("max_tokens", -5),
        ("max_tokens", 10.0),
        ("max_tokens", "10"),
        ("max_tokens", False),
        ("max_completion_tokens", 0),
        ("seed", 1.5),
        ("seed", "7"),
        ("seed", True),
        ("stream_options", "include_usage"),
        ("stop", 5),
        ("tools", {"type": "function"}),
    ],
)
def test_invalid_sampling_param(param: str, value: Any) -> None:
    error = _param_of(check_chat, _chat(**{param: value}))
    assert error.param == param
    assert error.code == "invalid_type"
    assert f"'{param}'" in error.message


@pytest.mark.parametrize(
    ("param", "value"), [("temperature", "hot"), ("stream", "yes"), ("n", 0), ("max_tokens", 0)]
)
def test_sampling_checked_for_completions(param: str, value: Any) -> None:
    error = _param_of(check_completion, {"model": "m", "prompt": "p", param: value})
    assert error.param == param


def test_long_values_truncated_in_message() -> None:
    error = _param_of(check_chat, _chat(temperature="x" * 500))
    assert len(error.message) < 200
    assert "..." in error.message


# --- prompt and input -----------------------------------------------------------------------


def test_missing_prompt() -> None:
    error = _param_of(check_completion, {"model": "m"})
    assert error.param == "prompt"
    assert error.code == "missing_required_parameter"


@pytest.mark.parametrize("prompt", [5, None, {"text": "x"}, True])
def test_invalid_prompt(prompt: Any) -> None:
    assert _param_of(check_completion, {"model": "m", "prompt": prompt}).param == "prompt"


def test_missing_input() -> None:
    error = _param_of(check_embedding, {"model": "m"})
    assert error.param == "input"
    assert error.code == "missing_required_parameter"


@pytest.mark.parametrize("value", [[], 5, None, {"a": 1}])
def test_invalid_input(value: Any) -> None:
    assert _param_of(check_embedding, {"model": "m", "input": value}).param == "input"


def test_error_renders_param_in_json() -> None:
    error = _param_of(check_chat, _chat(n=0))
    assert error.to_dict() == {
        "error": {
            "message": error.message,
            "type": "invalid_request_error",
            "param": "n",
            "code": "invalid_type",
        }
    }


# JSON-shaped bytes (often valid bodies) and plain noise, so both paths are exercised.
_bodies = st.one_of(
    st.binary(max_size=2000),
    st.dictionaries(
        st.sampled_from(["model", "messages", "prompt", "input", "stream", "seed", "n", "x"]),
        any_json_values,
        max_size=6,
    ).map(lambda body: json.dumps(body).encode()),  # stdlib: integers of any size
)


@settings(max_examples=400, deadline=None)
@given(raw=_bodies)
def test_the_validator_answers_any_bytes_with_a_gateway_error_or_a_body(raw: bytes) -> None:
    try:
        body = parse_body(raw)
    except HastenError as exc:
        assert exc.status_code == 400 and orjson.loads(exc.to_json())["error"]["message"]
        return
    for endpoint in (CHAT, COMPLETIONS, EMBEDDINGS):
        try:
            endpoint.check(body)
        except HastenError as exc:
            assert exc.status_code == 400
            assert orjson.loads(exc.to_json())["error"]["type"] == "invalid_request_error"


def test_depth_check_counts_levels_not_brackets() -> None:
    # Many brackets side by side (or inside strings) are shallow and pass.
    wide = '{"a": [' + ", ".join(["[]"] * 500) + '], "s": "' + "[" * 500 + '"}'
    assert len(parse_body(wide.encode(), 4)["a"]) == 500
    for raw in (b'{"a": {"b": [[[]]]}}', b'{"s": "' + b"t" * 9000 + b'", "a": [[[[]]]]}'):
        with pytest.raises(InvalidRequest, match="nested more than 4") as info:
            parse_body(raw, 4)
        assert info.value.param == "a"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"model": "expensive", "messages": [], "model": "cheap"}', "model"),
        (b'{"model": "m", "messages": [{"role": "user", "role": "system"}]}', "role"),
        (b'{"model": "m", "input": "x", "extra": {"k": 1, "k": 1}}', "k"),
    ],
)
def test_a_key_written_twice_is_a_400_naming_it(raw: bytes, key: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_body(raw)
    assert info.value.code == "duplicate_key" and info.value.param == key
    assert f"'{key}'" in info.value.message


def test_integers_beyond_64_bits_are_kept_exact() -> None:
    body = parse_body(b'{"model": "m", "x_big": 1180591620717411303424, "y": 1}')
    assert body["x_big"] == 2**70 and type(body["x_big"]) is int


@pytest.mark.parametrize("param", ["seed", "max_tokens", "n"])
def test_a_known_integer_beyond_64_bits_is_a_clear_400(param: str) -> None:
    body = parse_body(
        b'{"model": "m", "messages": [{"role": "user"}], "%s": 2%s}' % (param.encode(), b"0" * 25)
    )
    with pytest.raises(InvalidRequest) as info:
        check_chat(body)
    assert info.value.param == param and info.value.code == "integer_out_of_range"


def test_more_messages_than_the_bound_is_a_400() -> None:
    messages = [{"role": "user", "content": "x"}] * 11
    body = {"model": "m", "messages": messages}
    check_num_items(body, CHAT, 11)
    with pytest.raises(InvalidRequest) as info:
        check_num_items({**body, "messages": messages * 2}, CHAT, 11)
    assert info.value.param == "messages" and info.value.code == "too_many_items"
    with pytest.raises(InvalidRequest) as info:
        check_num_items({"model": "m", "input": ["a"] * 12}, EMBEDDINGS, 11)
    assert info.value.param == "input"
    check_num_items({"model": "m", "prompt": "one string"}, COMPLETIONS, 1)


async def test_a_large_body_is_worked_on_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    small = await off_loop(OFF_LOOP_BYTES - 1, threading.get_ident)
    large = await off_loop(OFF_LOOP_BYTES, threading.get_ident)
    assert small == loop_thread and large != loop_thread

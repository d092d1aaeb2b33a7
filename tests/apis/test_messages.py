"""The Messages API wire format: request checks, events, merge, replay, count_tokens, parsed
by the anthropic SDK."""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hasten.apis.messages import (
    MAX_CACHE_BREAKPOINTS,
    Refresher,
    StreamMerge,
    _check_message,
    _is_plain_message,
    _message_breakpoints,
    body_to_events,
    check_count_request,
    check_request,
    count_tokens,
    error_body,
    error_event,
    error_type,
    event_error,
    frame,
    image_tokens,
    is_complete,
    is_output_event,
    is_terminal,
    last_user_text,
    max_output_tokens,
    new_message,
    text_tokens,
    usage_of,
)
from hasten.apis.usage import Usage
from hasten.errors import InvalidRequest
from tests.apis.sdk_transport import Canned, anthropic_client

MESSAGE_ID = "msg_01" + "A" * 22
BASE = {"model": "claude-test", "max_tokens": 64}


def message(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    return new_message(
        message_id=MESSAGE_ID,
        model="claude-test",
        content=blocks,
        stop_reason=stop_reason,
        usage=Usage(1500, 20, 1024, 400),
    )


TEXT = {"type": "text", "text": "Paris is the capital."}
TOOL = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
THINKING = {"type": "thinking", "thinking": "The user asks...", "signature": "sig=="}


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(frame(event) for event in events)


# --- requests ---------------------------------------------------------------------------


def test_a_full_request_passes() -> None:
    check_request(
        {
            **BASE,
            "system": [
                {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [TEXT, TOOL]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                        {
                            "type": "text",
                            "text": "and?",
                            "cache_control": {"type": "ephemeral", "ttl": "1h"},
                        },
                    ],
                },
            ],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 5,
            "metadata": {"user_id": "u1"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "stream": True,
            "unknown_future_field": 1,
        }
        | {"max_tokens": 4096}
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({**BASE, "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        (BASE, "messages"),
        ({**BASE, "messages": []}, "messages"),
        ({**BASE, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({**BASE, "messages": [{"role": "user", "content": 1}]}, "messages.0.content"),
        (
            {**BASE, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages.0.content.0.text",
        ),
        (
            {
                **BASE,
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}
                ],
            },
            "messages.0.content.0.source.type",
        ),
        (
            {
                **BASE,
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}
                ],
            },
            "messages.0.content.0.input",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages.0.content.0.tool_use_id",
        ),
        (
            {
                **BASE,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "x", "cache_control": {"type": "forever"}}
                        ],
                    }
                ],
            },
            "messages.0.content.0.cache_control",
        ),
        (
            {
                **BASE,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": "x",
                                "cache_control": {"type": "ephemeral", "ttl": "2h"},
                            }
                        ],
                    }
                ],
            },
            "messages.0.content.0.cache_control.ttl",
        ),
        ({**BASE, "messages": [{"role": "user", "content": "x"}], "system": 5}, "system"),
        (
            {**BASE, "messages": [{"role": "user", "content": "x"}], "system": [{"type": "image"}]},
            "system.0",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]},
            "tools.0.input_schema",
        ),
        (
            {
                **BASE,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "some"},
            },
            "tool_choice.type",
        ),
        (
            {
                **BASE,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "tool"},
            },
            "tool_choice.name",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5},
            "temperature",
        ),
        ({**BASE, "messages": [{"role": "user", "content": "x"}], "top_k": -1}, "top_k"),
        (
            {**BASE, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "END"},
            "stop_sequences",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": "x"}], "metadata": {"user_id": 3}},
            "metadata.user_id",
        ),
        (
            {
                **BASE,
                "messages": [{"role": "user", "content": "x"}],
                "thinking": {"type": "enabled", "budget_tokens": 10},
            },
            "thinking.budget_tokens",
        ),
        (
            {
                **BASE,
                "messages": [{"role": "user", "content": "x"}],
                "thinking": {"type": "enabled", "budget_tokens": 2048},
            },
            "thinking.budget_tokens",
        ),
        ({**BASE, "messages": [{"role": "user", "content": "x"}], "stream": 1}, "stream"),
    ],
)
def test_an_invalid_request_is_a_400_naming_the_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_request(body)
    assert caught.value.param == param
    assert caught.value.status_code == 400


def test_at_most_four_cache_breakpoints() -> None:
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    body = {
        **BASE,
        "system": [marked, marked],
        "messages": [{"role": "user", "content": [marked, marked]}],
    }
    check_request(body)
    with pytest.raises(InvalidRequest, match=f"maximum of {MAX_CACHE_BREAKPOINTS}"):
        check_request({**body, "cache_control": {"type": "ephemeral"}})
    tool_result = {"type": "tool_result", "tool_use_id": "t", "content": [marked]}
    with pytest.raises(InvalidRequest, match="Found 5"):
        check_request(
            {**body, "messages": [{"role": "user", "content": [marked, marked, tool_result]}]}
        )


def test_count_requests_need_no_max_tokens() -> None:
    check_count_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})


def test_last_user_text_and_max_tokens() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": " second \n turn "}]},
        ]
    }
    assert last_user_text(body) == "second turn"
    tool_turn = {
        "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]
    }
    assert last_user_text(tool_turn) is None
    assert last_user_text({"messages": [{"role": "assistant", "content": "prefill"}]}) is None
    assert max_output_tokens({"max_tokens": 9}) == 9
    assert max_output_tokens({}) is None


# --- events and errors ------------------------------------------------------------------


def test_event_kinds_and_usage() -> None:
    events = body_to_events(orjson.dumps(message(TEXT)))
    kinds = [event["type"] for event in events]
    assert kinds == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [is_output_event(event) for event in events] == [
        False,
        False,
        False,
        True,
        False,
        True,
        True,
    ]
    assert [is_terminal(event) for event in events][-1] and is_complete(events[-1])
    usage = None
    for event in events:
        usage = usage_of(event, usage)
    assert usage == Usage(1500, 20, 1024, 400)
    tool_events = body_to_events(orjson.dumps(message(TOOL, stop_reason="tool_use")))
    assert is_output_event(tool_events[1])  # the tool call's block names the tool


def test_errors() -> None:
    assert error_type(400) == "invalid_request_error"
    assert error_type(401) == "authentication_error"
    assert error_type(403) == "permission_error"
    assert error_type(404) == "not_found_error"
    assert error_type(413) == "request_too_large"
    assert error_type(429) == "rate_limit_error"
    assert error_type(500) == "api_error"
    assert error_type(502) == "api_error" and error_type(503) == "api_error"
    assert error_type(529) == "overloaded_error"
    assert error_type(418) == "invalid_request_error" and error_type(599) == "api_error"
    assert orjson.loads(error_body(529, "Overloaded")) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    event = error_event("upstream broke", "overloaded_error")
    error = event_error(event)
    assert error is not None and error.code == "overloaded_error"
    assert is_terminal(event) and not is_complete(event)
    assert event_error({"type": "ping"}) is None
    assert frame(event).startswith(b"event: error\ndata: {")


def test_frame() -> None:
    expected = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    assert frame({"type": "message_stop"}) == expected
    assert frame(b'{"type":"message_stop"}') == expected
    with pytest.raises(ValueError):
        frame({"type": ""})


# --- merge and replay -------------------------------------------------------------------


@pytest.mark.parametrize(
    "blocks",
    [
        (TEXT,),
        (THINKING, TEXT, TOOL),
        (TOOL,),
        (),
        ({"type": "redacted_thinking", "data": "xx"}, TEXT),
    ],
)
def test_body_to_events_and_back(blocks: tuple[dict[str, Any], ...]) -> None:
    body = message(*blocks)
    merge = StreamMerge()
    for event in body_to_events(orjson.dumps(body)):
        merge.add(event)
    assert merge.is_whole
    assert orjson.loads(merge.body()) == body


def test_merge_refuses_what_is_not_whole() -> None:
    events = body_to_events(orjson.dumps(message(TEXT, TOOL)))
    merge = StreamMerge()
    for event in events[:-1]:
        merge.add(event)
    with pytest.raises(ValueError):
        merge.body()  # no message_stop
    snapshot = merge.snapshot()
    assert snapshot is not None and snapshot["content"][0]["text"] == TEXT["text"]
    merge.add(error_event("cut"))
    with pytest.raises(ValueError):
        merge.body()
    with pytest.raises(ValueError):
        StreamMerge().add({"type": "content_block_start", "index": 0, "content_block": TEXT})
    broken = StreamMerge()
    for event in body_to_events(orjson.dumps(message(TOOL))):
        if event["type"] == "content_block_delta":
            event = {**event, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}}
        if event["type"] == "content_block_stop":
            continue
        broken.add(event)
    with pytest.raises(ValueError):
        broken.body()


def test_refresher_gives_a_fresh_id_and_keeps_tool_ids() -> None:
    body = orjson.dumps(message(TEXT, TOOL))
    refresher = Refresher()
    fresh = orjson.loads(refresher.body(body))
    events = refresher.events(body_to_events(body))
    assert fresh["id"].startswith("msg_01") and fresh["id"] != MESSAGE_ID
    assert events[0]["message"]["id"] == fresh["id"]
    assert fresh["content"][1]["id"] == "toolu_01"
    assert Refresher().message_id != Refresher().message_id


# --- count_tokens -----------------------------------------------------------------------


def png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR"
    return base64.b64encode(
        header + width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    ).decode()


def test_text_tokens() -> None:
    assert text_tokens("") == 0
    assert text_tokens("The quick brown fox jumps.") == 6
    assert text_tokens("internationalization") == 3
    assert text_tokens("2024") == 2
    assert text_tokens("東京は大きい") == 6


def test_count_tokens_adds_every_part() -> None:
    one = {"model": "m", "messages": [{"role": "user", "content": "Hello there, how are you?"}]}
    base = count_tokens(one)
    assert base == 3 + 3 + 7
    with_system = count_tokens({**one, "system": "You answer briefly."})
    assert with_system == base + 4
    tool = {"name": "get_weather", "description": "Weather now", "input_schema": {"type": "object"}}
    with_tool = count_tokens({**one, "tools": [tool]})
    assert with_tool > base + 346
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png(200, 150)},
    }
    with_image = count_tokens(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [image, {"type": "text", "text": "Hello there, how are you?"}],
                }
            ],
        }
    )
    assert with_image == base + 40  # 200 x 150 / 750
    assert image_tokens({"type": "base64", "data": png(4000, 3000)}) == 1600
    assert image_tokens({"type": "url", "url": "http://x/a.png"}) == 1600


# --- the anthropic SDK parses what these build ------------------------------------------


def test_sdk_parses_a_whole_message_and_counts() -> None:
    client = anthropic_client(Canned(orjson.dumps(message(TEXT))))
    parsed = client.messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "capital?"}]
    )
    assert parsed.content[0].type == "text" and parsed.content[0].text == TEXT["text"]
    assert parsed.usage.cache_read_input_tokens == 1024
    assert parsed.usage.cache_creation_input_tokens == 400 and parsed.usage.input_tokens == 76
    request = {"model": "claude-test", "messages": [{"role": "user", "content": "capital?"}]}
    counted = anthropic_client(Canned(orjson.dumps({"input_tokens": count_tokens(request)})))
    result = counted.messages.count_tokens(
        model="claude-test", messages=[{"role": "user", "content": "capital?"}]
    )
    assert result.input_tokens == count_tokens(request)


def test_sdk_stream_helper_gets_the_final_message_with_thinking_and_a_tool() -> None:
    body = message(THINKING, TEXT, TOOL, stop_reason="tool_use")
    client = anthropic_client(Canned(sse(body_to_events(orjson.dumps(body))), is_stream=True))
    with client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "weather?"}]
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == TEXT["text"]
    assert final.stop_reason == "tool_use"
    thinking, text, tool = final.content
    assert text.type == "text"
    assert thinking.type == "thinking" and thinking.signature == "sig=="
    assert tool.type == "tool_use" and tool.input == {"city": "Paris"} and tool.id == "toolu_01"
    assert final.usage.output_tokens == 20 and final.usage.cache_read_input_tokens == 1024


def test_sdk_raw_stream_parses_every_event() -> None:
    body = message(TEXT)
    client = anthropic_client(Canned(sse(body_to_events(orjson.dumps(body))), is_stream=True))
    events = list(
        client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "x"}],
            stream=True,
        )
    )
    assert [event.type for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # the SDK swallows ping


def test_sdk_raises_on_a_mid_stream_error_and_on_an_error_body() -> None:
    events = body_to_events(orjson.dumps(message(TEXT)))[:4]
    events.append(error_event("Overloaded", "overloaded_error"))
    client = anthropic_client(Canned(sse(events), is_stream=True))
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            stream.get_final_message()
    assert "Overloaded" in str(caught.value)
    client = anthropic_client(Canned(error_body(400, "messages.0.role: bad"), status=400))
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(
            model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages.0.role: bad"},
    }


# --- the plain-history fast path of the request check -----------------------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from(["", "x", "t1", "Bash", "ephemeral"]),
    st.just({}),
    st.just({"type": "ephemeral"}),
    st.just({"type": "persistent"}),
)
_blocks = st.recursive(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", 3])},
        optional={
            "text": _values,
            "id": _values,
            "name": _values,
            "input": _values,
            "tool_use_id": _values,
            "is_error": _values,
            "cache_control": _values,
        },
    ),
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": _values},
        optional={"content": st.one_of(st.lists(inner, max_size=3), _values)},
    ),
    max_leaves=6,
)
_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", None])},
    optional={"content": st.one_of(_values, st.lists(st.one_of(_blocks, _values), max_size=4))},
)


_RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}


@settings(max_examples=400)
@given(message=_messages)
@example({"role": "user", "content": [{**_RESULT, "is_error": 1}]})  # 1 == True, not a bool
@example({"role": "user", "content": [{**_RESULT, "content": [{"type": "text", "text": 1}]}]})
@example({"role": "user", "content": [{"type": "text", "text": "", "cache_control": {}}]})
@example({"role": "user", "content": [{"type": "tool_use", "id": "", "name": "x", "input": {}}]})
def test_the_fast_path_passes_only_messages_the_full_check_passes(message: dict[str, Any]) -> None:
    """``_is_plain_message`` lets a message skip ``_check_message``: it must never let
    through one the full check refuses, nor one holding a breakpoint (those are counted
    only on the full path)."""
    if _is_plain_message(message):
        _check_message(message, "messages.0")
        assert _message_breakpoints(message) == 0

"""What the simulator makes of Responses and Messages requests: prompts as its prefix
caches see them, the chat request its generator runs on, and the stream it builds."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from hasten.apis import messages, responses
from hasten.errors import InvalidRequest
from hasten.simulator.inputs import MAX_COMPLETION_TOKENS
from hasten.simulator.native import (
    MESSAGES,
    RESPONSES,
    NativeStream,
    json_tokens,
    matched_stop,
    messages_prompt,
    parse_messages,
    parse_responses,
    responses_prompt_tokens,
)
from hasten.simulator.textgen import generate_pieces, seed_material
from tests.apis.test_messages_chat import messages_requests
from tests.apis.test_responses_chat import responses_requests
from tests.apis.test_translation_fuzz import mutated

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_json_tokens_split_words_and_punctuation() -> None:
    assert json_tokens({"a": [1, "b c"]}) == [
        "{",
        '"',
        "a",
        '"',
        ":",
        "[",
        "1",
        ",",
        '"',
        "b",
        "c",
        '"',
        "]",
        "}",
    ]
    assert json_tokens('{"x":2}') == ["{", '"', "x", '"', ":", "2", "}"]


def test_responses_prompt_puts_tools_first_and_ignores_item_ids() -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "id": "msg_run1", "role": "user", "content": "hello world"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c", "output": "sunny day"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "ok"}]},
    ]
    tokens = responses_prompt_tokens("be brief", [TOOL], items)
    assert tokens[0] == "<|tool|>"
    system = tokens.index("<|system|>")
    assert tokens[system : system + 4] == ["<|system|>", "be", "brief", "<|user|>"]
    assert "<|call|>" in tokens and "sunny" in tokens
    other_run = [{**items[0], "id": "msg_run2"}, *items[1:3], {**items[3], "id": "rs_2"}]
    assert responses_prompt_tokens("be brief", [TOOL], other_run) == tokens


def test_messages_prompt_boundaries_and_breakpoints() -> None:
    marked = {"type": "ephemeral"}
    body = {
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": marked}],
        "system": [{"type": "text", "text": "you are brief", "cache_control": marked}],
        "messages": [
            {"role": "user", "content": "hi there"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                    {"type": "text", "text": "next"},
                ],
            },
        ],
    }
    prompt = messages_prompt(body)
    tools_end = prompt.boundaries[0]
    assert prompt.tokens[:2] == ["<|tool|>", "{"] and prompt.breakpoints == (
        tools_end,
        tools_end + 4,
    )
    assert prompt.tokens[tools_end : tools_end + 4] == ["<|system|>", "you", "are", "brief"]
    assert prompt.boundaries[-1] == len(prompt.tokens)
    automatic = messages_prompt({**body, "cache_control": marked})
    assert automatic.breakpoints[-1] == len(automatic.tokens)


def test_parse_responses_continues_history_and_keeps_function_tools_only() -> None:
    body = {
        "model": "m",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
        "tools": [TOOL, {"type": "web_search"}],
        "tool_choice": "required",  # after a tool result it would answer in text
        "max_output_tokens": 10**6,
        "stream": True,
    }
    history = [
        {"type": "message", "role": "user", "content": "weather?"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "{}",
            "status": "completed",
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    native = parse_responses(body, history)
    assert native.api == RESPONSES and len(native.input_items) == 4
    generation = native.generation
    assert (
        generation.tool_names == ("get_weather",) and generation.stream and generation.include_usage
    )
    assert generation.max_tokens == MAX_COMPLETION_TOKENS
    assert "<|web_search_call|>" in native.prompt_tokens


def test_parse_messages_prefill_stops_and_server_tools() -> None:
    body = {
        "model": "claude",
        "max_tokens": 64000,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "document", "source": {"type": "text", "data": "x"}},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "The answer is"}]},
        ],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "stop_sequences": ["a", "b", "c", "d", "e"],
    }
    native = parse_messages(body)
    assert native.api == MESSAGES
    assert native.generation.prefix == "The answer is"
    assert native.generation.stops == ("a", "b", "c", "d", "e")
    assert native.generation.tool_names == ()
    assert native.generation.max_tokens == MAX_COMPLETION_TOKENS


def test_parse_refuses_what_the_api_itself_refuses() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_responses(
            {
                "model": "m",
                "input": "x",
                "tool_choice": {"type": "function", "name": "nope"},
                "tools": [TOOL],
            },
            [],
        )
    assert caught.value.param == "tool_choice"


def test_matched_stop_is_the_earliest() -> None:
    native = parse_messages(
        {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]}
    )
    material = seed_material("m", native.generation.prompt_json, None, 0)
    text = "".join(generate_pieces(material, 50))
    later, earlier = text[40:44], text[10:14]
    request = replace(native.generation, stops=(later, earlier))
    assert matched_stop(request, 50) == earlier
    assert matched_stop(native.generation, 50) is None  # no stop sequences


def chat_events(*chunks: dict[str, Any]) -> list[tuple[float, bytes, int]]:
    return [
        (float(i), b"data: " + orjson.dumps(chunk) + b"\n\n", 1) for i, chunk in enumerate(chunks)
    ]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_native_stream_events_and_failure_events() -> None:
    native = parse_responses({"model": "m", "input": "hi"}, [])
    completed: list[dict[str, Any]] = []
    stream = NativeStream(native, response_id="resp_1", created_at=0, on_complete=completed.append)
    scheduled = list(
        stream.schedule(
            chat_events(
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hi"}),
                chunk({}, "stop"),
            ),
            0.5,
        )
    )
    assert scheduled[0][0] == 0.5 and scheduled[0][1].startswith(b"event: response.created\n")
    assert sum(num_tokens for _, _, num_tokens in scheduled) == 3
    assert completed and completed[0]["status"] == "completed"
    failed = orjson.loads(stream.wire.error_event(5).split(b"data: ", 1)[1])
    assert failed["type"] == "response.failed" and failed["sequence_number"] == 5
    assert responses.output_text(failed["response"]) == "Hi"
    message_native = parse_messages(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    )
    message_stream = NativeStream(
        message_native, response_id="msg_1", created_at=0, stop_sequence="END"
    )
    events = [
        orjson.loads(data.split(b"data: ", 1)[1])
        for _, data, _ in message_stream.schedule(
            chat_events(chunk({"content": "a"}), chunk({}, "stop")), 0
        )
    ]
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    error = orjson.loads(message_stream.wire.error_event(3).split(b"data: ", 1)[1])
    assert messages.event_error(error) is not None
    assert message_stream.wire.done == b""


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated(responses_requests), mutated(messages_requests))
def test_odd_requests_are_answered_or_400s(
    responses_body: dict[str, Any], messages_body: dict[str, Any]
) -> None:
    """What the API checks let through, the simulator parses or refuses with a 400."""
    with contextlib.suppress(InvalidRequest):
        responses.check_request(responses_body)
        parse_responses(responses_body, [])
    with contextlib.suppress(InvalidRequest):
        messages.check_request(messages_body)
        parse_messages(messages_body)

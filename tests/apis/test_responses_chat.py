"""Responses <-> Chat Completions: requests, round trips, answers, streams, errors, and what
the openai SDK makes of the translated answers."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseFailedEvent

from hasten.apis import responses
from hasten.apis.responses import StreamMerge, check_request, frame
from hasten.apis.responses_chat import (
    LOGPROBS_INCLUDE,
    ChatToResponsesStream,
    chat_body_to_responses,
    chat_error_to_responses,
    chat_request_to_responses,
    responses_request_to_chat,
)
from hasten.errors import InvalidRequest
from tests.apis.sdk_transport import Canned, openai_client

RESPONSE_ID = "resp_" + "0" * 48
NOW = 1_700_000_000


# --- requests: particular cases ---------------------------------------------------------


NAMESPACE_TOOL = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        {"type": "function", "name": "spawn", "parameters": {"type": "object"}, "strict": False}
    ],
}


def test_a_namespace_tools_functions_go_to_chat_by_their_joined_names() -> None:
    """Codex 0.171 groups its sub-agent tools in a namespace tool."""
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "namespace": "agents",
        "name": "spawn",
        "arguments": "{}",
    }
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "go"}, call],
        "tools": [{"type": "function", "name": "shell", "parameters": {}}, NAMESPACE_TOOL],
        "tool_choice": {"type": "function", "namespace": "agents", "name": "spawn"},
    }
    check_request(body)
    chat = responses_request_to_chat(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["shell", "agents__spawn"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "agents__spawn"}}
    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "agents__spawn"
    with pytest.raises(InvalidRequest) as caught:
        bad = {**NAMESPACE_TOOL, "tools": [{"type": "web_search"}]}
        responses_request_to_chat({**body, "tools": [bad]})
    assert caught.value.param == "tools[0].tools[0].type"


def test_calls_of_a_namespaced_function_come_back_with_their_namespace() -> None:
    request = {"model": "m", "input": "go", "tools": [NAMESPACE_TOOL]}
    call: dict[str, Any] = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "agents__spawn"},
    }
    whole = {
        "id": "c",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{**call, "function": {**call["function"], "arguments": "{}"}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    (item,) = chat_body_to_responses(whole, request, response_id=RESPONSE_ID, created_at=NOW)[
        "output"
    ]
    assert (item["namespace"], item["name"], item["call_id"]) == ("agents", "spawn", "call_9")
    stream = ChatToResponsesStream(request, response_id=RESPONSE_ID, created_at=NOW)
    stream.start()
    opening = {"index": 0, **call, "function": {"name": "agents__spawn", "arguments": "{"}}
    events = stream.feed({"choices": [{"index": 0, "delta": {"tool_calls": [opening]}}]})
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert (added["item"]["namespace"], added["item"]["name"]) == ("agents", "spawn")


def test_a_named_tool_output_without_a_call_becomes_a_user_message() -> None:
    named = {"type": "function_call_output", "name": "goal_objective", "output": "ship it"}
    answer = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, call, answer, named]}
    check_request(body)
    chat = responses_request_to_chat(body)
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "ship it"},
    ]


def test_instructions_history_and_tools_to_chat() -> None:
    body = {
        "model": "gpt-test",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xx"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call", "call_id": "call_2", "name": "time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "noon"}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "and this?"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,AA",
                        "detail": "low",
                    },
                ],
            },
        ],
        "tools": [
            {"type": "function", "name": "weather", "parameters": {"type": "object"}},
            {"type": "function", "name": "time", "strict": False},
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 300,
        "temperature": 0,
        "text": {
            "format": {
                "type": "json_schema",
                "name": "out",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
        "reasoning": {"effort": "low", "summary": "auto"},
        "store": True,
        "truncation": "auto",
        "metadata": {"run": "1"},
        "stream": True,
        "future_field": 7,
    }
    check_request(body)
    chat = responses_request_to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
                },
            ],
        },
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "parameters": {"type": "object"}, "strict": True},
        },
        {"type": "function", "function": {"name": "time", "strict": False}},
    ]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["max_tokens"] == 300 and chat["temperature"] == 0
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["metadata"] == {"run": "1"} and chat["future_field"] == 7
    for dropped in ("store", "truncation", "instructions", "input", "reasoning", "text"):
        assert dropped not in chat
    alternative = responses_request_to_chat(body, max_tokens_field="max_completion_tokens")
    assert alternative["max_completion_tokens"] == 300 and "max_tokens" not in alternative


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {
                "tools": [
                    {"type": "function", "name": "f"},
                    {"type": "file_search", "vector_store_ids": []},
                ]
            },
            "tools[1].type",
        ),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}
                ]
            },
            "input[0].content[0].file_id",
        ),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_file", "file_url": "http://x"}]}
                ]
            },
            "input[0].content[0].file_url",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_image", "image_url": "x"}],
                    }
                ]
            },
            "input[0].output[0].type",
        ),
    ],
)
def test_what_chat_cannot_express_is_a_400_naming_it(change: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        responses_request_to_chat({"model": "m", "input": "x", **change})
    assert caught.value.param == param and caught.value.status_code == 400


def test_chat_to_responses() -> None:
    body = {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "http://x/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "It is 42.", "name": "bot"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "max_completion_tokens": 100,
        "max_tokens": 50,
        "seed": 3,
        "response_format": {"type": "json_object"},
        "reasoning_effort": "high",
        "logprobs": True,
        "top_logprobs": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = chat_request_to_responses(body)
    assert request["input"] == [
        {"type": "message", "role": "system", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "http://x/a.png", "detail": "auto"},
            ],
        },
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"type": "message", "role": "assistant", "content": "It is 42."},
    ]
    assert request["tools"] == [
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}
    ]
    assert request["tool_choice"] == {"type": "function", "name": "f"}
    assert request["max_output_tokens"] == 100
    assert request["text"] == {"format": {"type": "json_object"}}
    assert request["reasoning"] == {"effort": "high"}
    assert request["include"] == [LOGPROBS_INCLUDE] and request["top_logprobs"] == 2
    assert request["store"] is False and request["stream"] is True
    assert "seed" not in request and "stream_options" not in request
    check_request(request)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"n": 2}, "n"),
        ({"stop": ["END"]}, "stop"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": -1}, "presence_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
    ],
)
def test_what_responses_cannot_express_is_a_400_naming_it(
    change: dict[str, Any], param: str
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **change}
    with pytest.raises(InvalidRequest) as caught:
        chat_request_to_responses(body)
    assert caught.value.param == param


# --- requests: round trips --------------------------------------------------------------

words = st.text(alphabet="abcdefgh xyz", min_size=0, max_size=12)
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=8)
call_ids = st.builds(lambda n: f"call_{n}", st.integers(0, 99))
image_urls = st.sampled_from(["http://x/a.png", "data:image/png;base64,AAAA"])
details = st.sampled_from(["low", "high", "auto"])

responses_user_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "input_text", "text": t}, words),
        st.builds(
            lambda u, d: {"type": "input_image", "image_url": u, "detail": d}, image_urls, details
        ),
    ),
    min_size=1,
    max_size=3,
)
responses_messages = st.builds(
    lambda role, content: {"type": "message", "role": role, "content": content},
    st.sampled_from(["user", "system", "developer"]),
    words | responses_user_parts,
)
responses_assistant = st.builds(
    lambda content: {"type": "message", "role": "assistant", "content": content},
    words
    | st.lists(
        st.builds(lambda t: {"type": "output_text", "text": t, "annotations": []}, words),
        min_size=1,
        max_size=2,
    ),
)
responses_calls = st.builds(
    lambda c, n, a: {"type": "function_call", "call_id": c, "name": n, "arguments": a},
    call_ids,
    names,
    st.sampled_from(["{}", '{"a":1}']),
)
responses_outputs = st.builds(
    lambda c, o: {"type": "function_call_output", "call_id": c, "output": o},
    call_ids,
    words
    | st.lists(
        st.builds(lambda t: {"type": "input_text", "text": t}, words), min_size=1, max_size=2
    ),
)
responses_tools = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function"), "name": names},
        optional={
            "description": words,
            "parameters": st.just({"type": "object", "properties": {}}),
            "strict": st.booleans(),
        },
    ),
    max_size=3,
)
responses_requests = st.fixed_dictionaries(
    {
        "model": names,
        "input": words
        | st.lists(
            st.one_of(responses_messages, responses_assistant, responses_calls, responses_outputs),
            min_size=1,
            max_size=8,
        ),
    },
    optional={
        "instructions": words,
        "tools": responses_tools,
        "tool_choice": st.sampled_from(["none", "auto", "required"])
        | st.builds(lambda n: {"type": "function", "name": n}, names),
        "parallel_tool_calls": st.booleans(),
        "temperature": st.sampled_from([0, 0.5, 1.0]),
        "top_p": st.sampled_from([0.1, 1.0]),
        "max_output_tokens": st.integers(1, 4096),
        "stream": st.booleans(),
        "metadata": st.dictionaries(names, words, max_size=2),
        "user": words,
        "prompt_cache_key": words,
        "top_logprobs": st.integers(0, 5),
        "text": st.fixed_dictionaries(
            {},
            optional={
                "format": st.sampled_from(
                    [
                        {"type": "text"},
                        {"type": "json_object"},
                        {
                            "type": "json_schema",
                            "name": "n",
                            "schema": {"type": "object"},
                            "strict": True,
                        },
                    ]
                ),
                "verbosity": st.sampled_from(["low", "medium", "high"]),
            },
        ),
        "reasoning": st.builds(lambda e: {"effort": e}, st.sampled_from(["low", "medium", "high"])),
    },
)


def normal_responses(body: dict[str, Any]) -> dict[str, Any]:
    """The form a Responses request has after Chat and back: the same meaning, written
    one way (instructions as the first system item, a string input as a user item,
    function tools' strictness spelled out, logprobs asked through include)."""
    body = copy.deepcopy(body)
    value = body.pop("input")
    items = (
        [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value
    )
    if "instructions" in body:
        items.insert(0, {"type": "message", "role": "system", "content": body.pop("instructions")})
    body["input"] = items
    for tool in body.get("tools", []):
        tool["strict"] = tool.get("strict", True)
    if "top_logprobs" in body:
        body["include"] = [LOGPROBS_INCLUDE]
    text = body.get("text")
    if text == {}:
        del body["text"]
    body["store"] = False
    return body


@settings(max_examples=300, deadline=None)
@given(responses_requests)
def test_responses_to_chat_and_back_keeps_every_field(body: dict[str, Any]) -> None:
    check_request(body)
    chat = responses_request_to_chat(body)
    assert chat_request_to_responses(chat) == normal_responses(body)


chat_user_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, words),
        st.builds(
            lambda u, d: {"type": "image_url", "image_url": {"url": u, "detail": d}},
            image_urls,
            details,
        ),
    ),
    min_size=1,
    max_size=3,
)
chat_tool_calls = st.lists(
    st.builds(
        lambda c, n, a: {"id": c, "type": "function", "function": {"name": n, "arguments": a}},
        call_ids,
        names,
        st.sampled_from(["{}", '{"x":[1]}']),
    ),
    min_size=1,
    max_size=3,
)
chat_messages = st.one_of(
    st.builds(
        lambda r, c: {"role": r, "content": c},
        st.sampled_from(["system", "developer", "user"]),
        words | chat_user_parts,
    ),
    st.builds(lambda c: {"role": "assistant", "content": c}, words),
    st.builds(
        lambda c, t: {"role": "assistant", "content": c, "tool_calls": t},
        st.none() | words,
        chat_tool_calls,
    ),
    st.builds(lambda c, o: {"role": "tool", "tool_call_id": c, "content": o}, call_ids, words),
)
chat_requests = st.fixed_dictionaries(
    {"model": names, "messages": st.lists(chat_messages, min_size=1, max_size=8)},
    optional={
        "tools": st.lists(
            st.builds(
                lambda n, s: {
                    "type": "function",
                    "function": {"name": n, "parameters": {"type": "object"}, "strict": s},
                },
                names,
                st.booleans(),
            ),
            max_size=2,
        ),
        "tool_choice": st.sampled_from(["none", "auto", "required"])
        | st.builds(lambda n: {"type": "function", "function": {"name": n}}, names),
        "temperature": st.sampled_from([0, 1.5]),
        "max_tokens": st.integers(1, 999),
        "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
        "reasoning_effort": st.sampled_from(["low", "high"]),
        "verbosity": st.sampled_from(["low", "high"]),
        "user": words,
        "metadata": st.dictionaries(names, words, max_size=2),
        "parallel_tool_calls": st.booleans(),
        "service_tier": st.sampled_from(["auto", "flex"]),
    },
)


def normal_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The form a chat request has after Responses and back: Responses items have no
    turns, so calls right after an assistant's text join that assistant message."""
    body = copy.deepcopy(body)
    messages: list[dict[str, Any]] = []
    for message in body["messages"]:
        last = messages[-1] if messages else None
        if (
            last is not None
            and last["role"] == "assistant"
            and message["role"] == "assistant"
            and message.get("content") is None
            and "tool_calls" in message
        ):
            last.setdefault("tool_calls", []).extend(message["tool_calls"])
        else:
            messages.append(message)
    body["messages"] = messages
    return body


@settings(max_examples=300, deadline=None)
@given(chat_requests)
def test_chat_to_responses_and_back_keeps_every_field(body: dict[str, Any]) -> None:
    request = chat_request_to_responses(body)
    check_request(request)
    assert responses_request_to_chat(request) == normal_chat(body)


# --- answers ----------------------------------------------------------------------------


def chat_body(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": NOW,
        "model": "gpt-test-0613",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 9,
            "total_tokens": 1209,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    }


REQUEST = {
    "model": "gpt-test",
    "input": "hi",
    "temperature": 0,
    "tools": [],
    "metadata": {"a": "b"},
}


def test_a_whole_text_answer() -> None:
    response = chat_body_to_responses(
        chat_body({"role": "assistant", "content": "Hello!"}),
        REQUEST,
        response_id=RESPONSE_ID,
        created_at=NOW,
    )
    assert response["id"] == RESPONSE_ID and response["status"] == "completed"
    assert response["model"] == "gpt-test-0613" and response["temperature"] == 0
    assert response["metadata"] == {"a": "b"}
    assert responses.output_text(response) == "Hello!"
    assert response["usage"]["input_tokens"] == 1200
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 1024


def test_a_whole_answer_with_reasoning_refusal_and_calls() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking...",
        "refusal": "I will not.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
            {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    }
    response = chat_body_to_responses(
        chat_body(message, "tool_calls"), REQUEST, response_id=RESPONSE_ID, created_at=NOW
    )
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    assert response["output"][0]["content"] == [{"type": "reasoning_text", "text": "thinking..."}]
    assert response["output"][1]["content"] == [{"type": "refusal", "refusal": "I will not."}]
    assert [item["call_id"] for item in response["output"][2:]] == ["call_a", "call_b"]
    assert len({item["id"] for item in response["output"]}) == 4


@pytest.mark.parametrize(
    ("finish_reason", "status", "reason"),
    [
        ("length", "incomplete", "max_output_tokens"),
        ("content_filter", "incomplete", "content_filter"),
        ("stop", "completed", None),
    ],
)
def test_finish_reasons(finish_reason: str, status: str, reason: str | None) -> None:
    response = chat_body_to_responses(
        chat_body({"role": "assistant", "content": "abc"}, finish_reason),
        REQUEST,
        response_id=RESPONSE_ID,
        created_at=NOW,
    )
    assert response["status"] == status
    assert response["incomplete_details"] == (None if reason is None else {"reason": reason})


def test_a_body_that_is_not_chat_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        chat_body_to_responses({"choices": []}, REQUEST, response_id=RESPONSE_ID, created_at=NOW)


def test_errors_keep_the_openai_shape() -> None:
    body = orjson.dumps(
        {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "param": "model",
                "code": None,
            }
        }
    )
    assert chat_error_to_responses(404, body) == body
    wrapped = orjson.loads(chat_error_to_responses(502, b"<html>Bad Gateway</html>"))
    assert wrapped["error"]["message"] == "<html>Bad Gateway</html>"
    assert wrapped["error"]["type"] == "server_error"


# --- streams ----------------------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": NOW,
        "model": "gpt-test-0613",
        "choices": choices,
        "usage": usage,
    }


USAGE = {
    "prompt_tokens": 50,
    "completion_tokens": 4,
    "total_tokens": 54,
    "prompt_tokens_details": {"cached_tokens": 32},
}
TEXT_CHUNKS = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " there"}),
    chunk({}, "stop"),
    chunk(None, usage=USAGE),
]
CALL_CHUNKS = [
    chunk({"role": "assistant", "content": None, "reasoning_content": "Let me"}),
    chunk({"reasoning_content": " see."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
    chunk(
        {"tool_calls": [{"index": 1, "id": "call_b", "function": {"arguments": "{"}}]}
    ),  # name late
    chunk({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "}"}}]}),
    chunk({}, "tool_calls"),
    chunk(None, usage=USAGE),
]


def translate(
    chunks: list[dict[str, Any]], request: dict[str, Any] = REQUEST
) -> list[dict[str, Any]]:
    stream = ChatToResponsesStream(request, response_id=RESPONSE_ID, created_at=NOW)
    events = stream.start()
    for item in chunks:
        events.extend(stream.feed(item))
    events.extend(stream.finish())
    return events


def whole(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole chat body the chunks stand for."""
    content, reasoning, finish = "", "", None
    calls: dict[int, dict[str, Any]] = {}
    for item in chunks:
        for choice in item["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                entry = calls.setdefault(
                    call["index"],
                    {"id": None, "type": "function", "function": {"name": None, "arguments": ""}},
                )
                entry["id"] = entry["id"] or call.get("id")
                function = call.get("function") or {}
                entry["function"]["name"] = entry["function"]["name"] or function.get("name")
                entry["function"]["arguments"] += function.get("arguments") or ""
            finish = choice["finish_reason"] or finish
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    body = chat_body(message, finish or "stop")
    body["usage"] = USAGE
    return body


def test_text_stream_is_the_official_event_sequence() -> None:
    events = translate(TEXT_CHUNKS)
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 32
    assert events[6]["text"] == "Hello there"


@pytest.mark.parametrize("chunks", [TEXT_CHUNKS, CALL_CHUNKS], ids=["text", "calls"])
def test_a_merged_stream_is_the_translated_whole_answer(chunks: list[dict[str, Any]]) -> None:
    merge = StreamMerge()
    for event in translate(chunks):
        merge.add(event)
    expected = chat_body_to_responses(
        whole(chunks), REQUEST, response_id=RESPONSE_ID, created_at=NOW
    )
    assert orjson.loads(merge.body()) == expected


def test_tool_call_stream_events() -> None:
    events = translate(CALL_CHUNKS)
    kinds = [event["type"] for event in events]
    assert kinds[2:8] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
    ]
    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert [item["type"] for item in added] == ["reasoning", "function_call", "function_call"]
    assert added[2]["name"] == "g" and added[2]["call_id"] == "call_b"
    done = [event for event in events if event["type"] == "response.function_call_arguments.done"]
    assert [event["arguments"] for event in done] == ['{"x":1}', "{}"]


def test_a_length_cut_stream_is_incomplete() -> None:
    events = translate([chunk({"content": "abc"}), chunk({}, "length")])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-2]["item"]["status"] == "incomplete"


def test_fail_ends_with_response_failed_and_nothing_after() -> None:
    stream = ChatToResponsesStream(REQUEST, response_id=RESPONSE_ID, created_at=NOW)
    events = stream.feed(chunk({"content": "Hel"}))
    events += stream.fail("upstream went away", "upstream_stream_error")
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hel"
    assert events[-1]["response"]["error"] == {
        "code": "upstream_stream_error",
        "message": "upstream went away",
    }
    assert stream.finish() == [] and stream.fail("again") == []
    with pytest.raises(ValueError):
        stream.feed(chunk({"content": "x"}))
    with pytest.raises(ValueError):
        ChatToResponsesStream(REQUEST, created_at=NOW).feed({"choices": [{"delta": 5}]})


# --- the openai SDK parses translated answers -------------------------------------------


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(frame(event) for event in events)


def test_sdk_parses_translated_streams() -> None:
    client = openai_client(Canned(sse(translate(TEXT_CHUNKS)), is_stream=True))
    with client.responses.stream(model="gpt-test", input="hi") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello there" and final.output_text == "Hello there"
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 32
    client = openai_client(Canned(sse(translate(CALL_CHUNKS)), is_stream=True))
    with client.responses.stream(model="gpt-test", input="hi") as stream:
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(call.name, call.arguments) for call in calls] == [("f", '{"x":1}'), ("g", "{}")]


def test_sdk_sees_a_failed_translated_stream() -> None:
    stream = ChatToResponsesStream(REQUEST, response_id=RESPONSE_ID, created_at=NOW)
    events = stream.start() + stream.feed(chunk({"content": "Hel"})) + stream.fail("cut")
    client = openai_client(Canned(sse(events), is_stream=True))
    parsed = list(client.responses.create(model="gpt-test", input="hi", stream=True))
    assert isinstance(parsed[-1], ResponseFailedEvent)


def test_sdk_function_tool_round_trip_through_chat() -> None:
    """Turn 1 answers with a call (a chat answer translated); turn 2 sends the call's
    output, which must reach the chat upstream as a tool message answering that call."""
    tools: Any = [
        {
            "type": "function",
            "name": "f",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]
    first = chat_body(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        "tool_calls",
    )
    canned = Canned(b"")
    client = openai_client(canned)
    request: dict[str, Any] = {"model": "gpt-test", "input": "call f", "tools": tools}
    canned.body = orjson.dumps(
        chat_body_to_responses(first, request, response_id=RESPONSE_ID, created_at=NOW)
    )
    response = client.responses.create(**request)
    call = response.output[0]
    assert call.type == "function_call" and call.call_id == "call_a"
    follow_up = [
        {"role": "user", "content": "call f"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "42"},
    ]
    canned.body = orjson.dumps(
        chat_body_to_responses(
            chat_body({"role": "assistant", "content": "It is 42."}),
            request,
            response_id=RESPONSE_ID,
            created_at=NOW,
        )
    )
    answer = client.responses.create(model="gpt-test", input=follow_up, tools=tools)
    assert answer.output_text == "It is 42."
    sent = canned.requests[-1]
    check_request(sent)
    messages = responses_request_to_chat(sent)["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_a"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "42"}

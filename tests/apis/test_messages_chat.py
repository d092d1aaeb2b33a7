"""Messages <-> Chat Completions: requests, round trips, answers, streams, errors, and what
the anthropic and openai SDKs make of the translated answers."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import openai
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hasten.apis import messages
from hasten.apis.chat import CHAT, BodyMerge
from hasten.apis.messages import StreamMerge, body_to_events, check_request, frame
from hasten.apis.messages_chat import (
    DEFAULT_MAX_TOKENS,
    ChatToMessagesStream,
    MessagesToChatStream,
    chat_body_to_messages,
    chat_error_to_messages,
    chat_request_to_messages,
    messages_body_to_chat,
    messages_error_to_chat,
    messages_request_to_chat,
)
from hasten.apis.usage import Usage
from hasten.errors import InvalidRequest
from tests.apis.sdk_transport import Canned, anthropic_client, openai_client

MESSAGE_ID = "msg_01" + "B" * 22
NOW = 1_700_000_000
EPHEMERAL = {"type": "ephemeral", "ttl": "1h"}


# --- requests: particular cases ---------------------------------------------------------


def test_a_claude_code_like_request_to_chat() -> None:
    body = {
        "model": "claude-test",
        "max_tokens": 2048,
        "system": [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": "Today is Monday.", "cache_control": EPHEMERAL},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "List files", "cache_control": EPHEMERAL}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "use ls", "signature": "sig"},
                    {"type": "text", "text": "Running ls."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a.py\nb.py",
                        "is_error": False,
                    },
                    {"type": "text", "text": "Now count them."},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                ],
            },
        ],
        "tools": [
            {
                "name": "bash",
                "description": "Run a command",
                "input_schema": {"type": "object"},
                "cache_control": EPHEMERAL,
            }
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stop_sequences": ["\n\nHuman:"],
        "temperature": 0,
        "metadata": {"user_id": "session-123"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "cache_control": {"type": "ephemeral"},
        "stream": True,
    }
    check_request(body)
    chat = messages_request_to_chat(body)
    assert chat["messages"] == [
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "You are a coding agent."},
                {"type": "text", "text": "Today is Monday."},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "List files"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Running ls."}],
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py\nb.py"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Now count them."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["max_tokens"] == 2048 and chat["stop"] == ["\n\nHuman:"]
    assert chat["user"] == "session-123" and chat["temperature"] == 0
    assert chat["stream_options"] == {"include_usage": True}
    assert b"cache_control" not in orjson.dumps(chat)  # litellm#38790
    assert "thinking" not in chat and "metadata" not in chat


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"container": "c_1"}, "container"),
        ({"mcp_servers": []}, "mcp_servers"),
        (
            {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
            "context_management.edits.0.type",
        ),
        ({"context_management": {"clear": True}}, "context_management"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "text", "data": "x"}}],
                    }
                ]
            },
            "messages.0.content.0.type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages.0.content.0.source.type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [
                                    {"type": "image", "source": {"type": "url", "url": "http://x"}}
                                ],
                            }
                        ],
                    }
                ]
            },
            "messages.0.content.0.content.0.type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "server_tool_use",
                                "id": "s",
                                "name": "web_search",
                                "input": {},
                            }
                        ],
                    }
                ]
            },
            "messages.0.content.0.type",
        ),
    ],
)
def test_what_chat_cannot_express_is_a_400_naming_it(change: dict[str, Any], param: str) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], **change}
    with pytest.raises(InvalidRequest) as caught:
        messages_request_to_chat(body)
    assert caught.value.param == param


def test_thinking_edits_go_with_the_thinking_blocks() -> None:
    """Claude Code 2.1 sends clear_thinking_20251015 with every request: only thinking
    blocks, which go nowhere toward chat, so the request translates."""
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "x"}],
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    chat = messages_request_to_chat(body)
    assert "context_management" not in chat and "thinking" not in chat
    assert chat["messages"] == [{"role": "user", "content": "x"}]


def test_chat_to_messages() -> None:
    body = {
        "model": "claude-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/jpeg;base64,/9j/", "detail": "high"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "one"},
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "two"}],
            },
            {"role": "user", "content": "thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "description": "F", "parameters": {"type": "object"}},
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "max_completion_tokens": 200,
        "stop": "END",
        "user": "u1",
        "seed": 4,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "reasoning_effort": "medium",
        "top_k": 3,
    }
    request = chat_request_to_messages(body)
    assert request["system"] == "Be brief."
    assert request["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "call_2", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "one"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [{"type": "text", "text": "two"}],
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    assert request["tools"] == [
        {"name": "f", "description": "F", "input_schema": {"type": "object"}}
    ]
    assert request["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert request["max_tokens"] == 200 and request["stop_sequences"] == ["END"]
    assert request["metadata"] == {"user_id": "u1"} and request["top_k"] == 3
    assert request["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object"}},
        "effort": "medium",
    }
    assert "seed" not in request
    check_request(request)
    short = chat_request_to_messages({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert short["max_tokens"] == DEFAULT_MAX_TOKENS


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"n": 3}, "n"),
        ({"temperature": 1.5}, "temperature"),
        ({"frequency_penalty": 1}, "frequency_penalty"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format.type"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"functions": []}, "functions"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]},
            "messages[1].role",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        ({"tool_choice": {"type": "allowed_tools", "allowed_tools": {}}}, "tool_choice"),
    ],
)
def test_what_messages_cannot_express_is_a_400_naming_it(
    change: dict[str, Any], param: str
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **change}
    with pytest.raises(InvalidRequest) as caught:
        chat_request_to_messages(body)
    assert caught.value.param == param


# --- requests: round trips --------------------------------------------------------------

words = st.text(alphabet="abcdefgh xyz", min_size=1, max_size=12)
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=8)
tool_ids = st.builds(lambda n: f"toolu_{n}", st.integers(0, 99))
cache_controls = st.none() | st.sampled_from([{"type": "ephemeral"}, EPHEMERAL])


def with_cache(block: dict[str, Any], cache: dict[str, Any] | None) -> dict[str, Any]:
    return block if cache is None else {**block, "cache_control": cache}


text_blocks = st.builds(
    lambda t, c: with_cache({"type": "text", "text": t}, c), words, cache_controls
)
image_blocks = st.builds(
    lambda source: {"type": "image", "source": source},
    st.sampled_from(
        [
            {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            {"type": "url", "url": "https://example.com/a.jpg"},
        ]
    ),
)
tool_results = st.builds(
    lambda i, content, e, c: with_cache(
        {
            "type": "tool_result",
            "tool_use_id": i,
            "content": content,
            **({} if e is None else {"is_error": e}),
        },
        c,
    ),
    tool_ids,
    words
    | st.lists(st.builds(lambda t: {"type": "text", "text": t}, words), min_size=1, max_size=2),
    st.none() | st.booleans(),
    cache_controls,
)
user_messages = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, words),
    st.builds(
        lambda results, rest: {"role": "user", "content": results + rest},
        st.lists(tool_results, max_size=2),
        st.lists(text_blocks | image_blocks, max_size=3),
    ).filter(lambda message: message["content"]),
)
assistant_messages = st.one_of(
    st.builds(lambda t: {"role": "assistant", "content": t}, words),
    st.builds(
        lambda thinking, texts, uses: {"role": "assistant", "content": thinking + texts + uses},
        st.lists(st.just({"type": "thinking", "thinking": "hmm", "signature": "sig"}), max_size=1),
        st.lists(text_blocks, max_size=2),
        st.lists(
            st.builds(
                lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
                tool_ids,
                names,
                st.sampled_from([{}, {"path": "a.py"}, {"n": [1, 2], "deep": {"x": None}}]),
            ),
            max_size=2,
        ),
    ).filter(lambda message: any(block["type"] != "thinking" for block in message["content"])),
)
messages_requests = st.fixed_dictionaries(
    {
        "model": names,
        "max_tokens": st.integers(1, 8192),
        "messages": st.lists(user_messages | assistant_messages, min_size=1, max_size=6),
    },
    optional={
        "system": words | st.lists(text_blocks, min_size=1, max_size=3),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": names, "input_schema": st.just({"type": "object", "properties": {}})},
                optional={
                    "description": words,
                    "cache_control": cache_controls,
                    "strict": st.booleans(),
                },
            ),
            max_size=3,
        ),
        "tool_choice": st.fixed_dictionaries(
            {"type": st.sampled_from(["auto", "any", "none"])},
            optional={"disable_parallel_tool_use": st.booleans()},
        )
        | st.builds(lambda n: {"type": "tool", "name": n}, names),
        "stop_sequences": st.lists(words, max_size=3),
        "temperature": st.sampled_from([0, 0.7, 1]),
        "top_p": st.sampled_from([0.5, 1]),
        "top_k": st.integers(0, 50),
        "metadata": st.builds(lambda u: {"user_id": u}, words),
        "stream": st.booleans(),
        "cache_control": st.just({"type": "ephemeral"}),
        "thinking": st.just({"type": "enabled", "budget_tokens": 1024}),
        "output_config": st.fixed_dictionaries(
            {},
            optional={
                "format": st.just({"type": "json_schema", "schema": {"type": "object"}}),
                "effort": st.sampled_from(["low", "high"]),
            },
        ),
    },
)


def normal_messages(body: dict[str, Any]) -> dict[str, Any]:
    """What a Messages request keeps through Chat and back: everything but what chat has
    no place for (cache_control, is_error, thinking) and the block order Anthropic
    requires (an assistant's text before its tool calls)."""
    body = copy.deepcopy(body)
    body.pop("cache_control", None)
    body.pop("thinking", None)
    if body.get("output_config") == {}:
        del body["output_config"]
    for tool in body.get("tools", []):
        tool.pop("cache_control", None)
    if isinstance(body.get("system"), list):
        for block in body["system"]:
            block.pop("cache_control", None)
    normal: list[dict[str, Any]] = []
    for message in body["messages"]:
        content = message["content"]
        if not isinstance(content, str):
            content = [block for block in content if block["type"] != "thinking"]
            for block in content:
                block.pop("cache_control", None)
                block.pop("is_error", None)
            if message["role"] == "assistant":
                content.sort(key=lambda block: block["type"] == "tool_use")
        last = normal[-1] if normal else None
        if (
            last is not None
            and last["role"] == message["role"] == "user"
            and isinstance(last["content"], list)
            and all(block["type"] == "tool_result" for block in last["content"])
        ):
            # Chat has tool messages where Anthropic has a user turn of tool results: the
            # user's next words join that turn (Anthropic merges consecutive user turns).
            last["content"] += (
                [{"type": "text", "text": content}] if isinstance(content, str) else content
            )
        else:
            normal.append({**message, "content": content})
    body["messages"] = normal
    return body


@settings(max_examples=300, deadline=None)
@given(messages_requests)
def test_messages_to_chat_and_back_keeps_every_field(body: dict[str, Any]) -> None:
    if body.get("thinking") is not None:
        body["max_tokens"] = max(body["max_tokens"], 2048)
    assume(messages.count_cache_breakpoints(body) <= messages.MAX_CACHE_BREAKPOINTS)
    check_request(body)
    chat = messages_request_to_chat(body)
    assert b"cache_control" not in orjson.dumps(chat)
    back = chat_request_to_messages(chat)
    check_request(back)
    assert back == normal_messages(body)


# --- answers ----------------------------------------------------------------------------


def chat_body(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": NOW,
        "model": "local",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": 3000,
            "completion_tokens": 12,
            "total_tokens": 3012,
            "prompt_tokens_details": {"cached_tokens": 2048, "cache_write_tokens": 512},
        },
    }


def test_chat_answer_as_a_message() -> None:
    message = chat_body_to_messages(
        chat_body(
            {
                "role": "assistant",
                "content": "Sure.",
                "reasoning_content": "thinking",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":1}'},
                    }
                ],
            },
            "tool_calls",
        ),
        message_id=MESSAGE_ID,
    )
    assert message["id"] == MESSAGE_ID and message["model"] == "local"
    assert [block["type"] for block in message["content"]] == ["thinking", "text", "tool_use"]
    assert message["content"][2] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "f",
        "input": {"a": 1},
    }
    assert message["stop_reason"] == "tool_use"
    # litellm#36091: cached tokens survive the translation, and Anthropic's input_tokens
    # counts only what was neither read from nor written to the cache.
    assert message["usage"] == {
        "input_tokens": 440,
        "cache_creation_input_tokens": 512,
        "cache_read_input_tokens": 2048,
        "output_tokens": 12,
    }


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ],
)
def test_stop_reasons_both_ways(finish: str, stop: str) -> None:
    message = chat_body_to_messages(
        chat_body({"role": "assistant", "content": "x"}, finish), message_id=MESSAGE_ID
    )
    assert message["stop_reason"] == stop
    assert messages_body_to_chat(message, created=NOW)["choices"][0]["finish_reason"] == finish


def test_a_named_stop_string_is_a_stop_sequence() -> None:
    body = chat_body({"role": "assistant", "content": "x"})
    body["choices"][0]["stop_reason"] = "END"  # vLLM names the stop string that matched
    message = chat_body_to_messages(body, message_id=MESSAGE_ID)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    stream = ChatToMessagesStream(model="local")
    stream.feed(chunk({"content": "x"}))
    finish = chunk({}, "stop")
    finish["choices"][0]["stop_reason"] = "END"
    stream.feed(finish)
    assert stream.finish()[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_message_as_a_chat_answer() -> None:
    message = messages.new_message(
        message_id=MESSAGE_ID,
        model="claude-test",
        content=[
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Hi "},
            {"type": "text", "text": "there"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"q": "x"}},
        ],
        stop_reason="tool_use",
        usage=Usage(1000, 5, 800, 100),
    )
    chat = messages_body_to_chat(message, created=NOW)
    choice = chat["choices"][0]
    assert choice["message"]["content"] == "Hi there"
    assert choice["message"]["reasoning_content"] == "hm"
    assert choice["message"]["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"q":"x"}'}}
    ]
    assert choice["finish_reason"] == "tool_calls"
    assert chat["usage"]["prompt_tokens"] == 1000
    assert chat["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 800,
        "cache_write_tokens": 100,
    }


def test_bad_answers_are_value_errors() -> None:
    with pytest.raises(ValueError):
        chat_body_to_messages({"choices": []}, message_id=MESSAGE_ID)
    bad_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}],
    }
    with pytest.raises(ValueError):
        chat_body_to_messages(chat_body(bad_call), message_id=MESSAGE_ID)
    with pytest.raises(ValueError):
        messages_body_to_chat({"content": 3}, created=NOW)


def test_errors_both_ways() -> None:
    anthropic_error = messages.error_body(529, "Overloaded")
    chat = orjson.loads(messages_error_to_chat(529, anthropic_error))
    assert chat == {
        "error": {
            "message": "Overloaded",
            "type": "server_error",
            "param": None,
            "code": "overloaded_error",
        }
    }
    openai_error = orjson.dumps(
        {
            "error": {
                "message": "Rate limited",
                "type": "rate_limit_error",
                "param": None,
                "code": None,
            }
        }
    )
    assert orjson.loads(chat_error_to_messages(429, openai_error)) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Rate limited"},
    }
    assert orjson.loads(chat_error_to_messages(502, b"Bad Gateway"))["error"] == {
        "type": "api_error",
        "message": "Bad Gateway",
    }
    client = anthropic_client(Canned(chat_error_to_messages(429, openai_error), status=429))
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    chat_client = openai_client(Canned(messages_error_to_chat(529, anthropic_error), status=529))
    with pytest.raises(openai.InternalServerError):
        chat_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


# --- chat streams as Messages streams ---------------------------------------------------


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
        "model": "local",
        "choices": choices,
        "usage": usage,
    }


USAGE = {
    "prompt_tokens": 3000,
    "completion_tokens": 12,
    "total_tokens": 3012,
    "prompt_tokens_details": {"cached_tokens": 2048},
}
CHUNKS = [
    chunk({"role": "assistant", "content": None, "reasoning_content": "I should"}),
    chunk({"reasoning_content": " call f."}),
    chunk({"content": "Calling f."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a":'},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
    chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "{}"}}]}),
    chunk({}, "tool_calls"),
    chunk(None, usage=USAGE),
]


def to_messages_events(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stream = ChatToMessagesStream(message_id=MESSAGE_ID, model="local")
    events = stream.start()
    for item in chunks:
        events += stream.feed(item)
    return events + stream.finish()


def test_message_start_comes_at_once() -> None:
    stream = ChatToMessagesStream(message_id=MESSAGE_ID, model="local")
    first = stream.start()
    assert [event["type"] for event in first] == ["message_start", "ping"]
    assert first[0]["message"]["id"] == MESSAGE_ID
    # Thinking streams as it comes: nothing is held back until it ends (litellm#39431).
    events = stream.feed(CHUNKS[0])
    assert [event["type"] for event in events] == ["content_block_start", "content_block_delta"]
    assert events[1]["delta"] == {"type": "thinking_delta", "thinking": "I should"}


def test_chat_stream_as_messages_events() -> None:
    events = to_messages_events(CHUNKS)
    starts = [event["content_block"] for event in events if event["type"] == "content_block_start"]
    assert [block["type"] for block in starts] == ["thinking", "text", "tool_use", "tool_use"]
    assert starts[3]["name"] == "g" and starts[3]["id"] == "call_2"
    indexes = [event["index"] for event in events if "index" in event]
    assert indexes == sorted(indexes)  # one block at a time
    assert (
        events[-2]["type"] == "message_delta" and events[-2]["delta"]["stop_reason"] == "tool_use"
    )
    assert events[-2]["usage"]["cache_read_input_tokens"] == 2048
    assert events[-1] == {"type": "message_stop"}
    merge = StreamMerge()
    for event in events:
        merge.add(event)
    whole = chat_body(
        {
            "role": "assistant",
            "content": "Calling f.",
            "reasoning_content": "I should call f.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        "tool_calls",
    )
    whole["usage"] = USAGE
    assert orjson.loads(merge.body()) == chat_body_to_messages(whole, message_id=MESSAGE_ID)


def test_interleaved_tool_calls_and_failures() -> None:
    stream = ChatToMessagesStream(model="local")
    stream.feed(
        chunk(
            {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]}
        )
    )
    stream.feed(
        chunk(
            {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}}]}
        )
    )
    with pytest.raises(ValueError):
        stream.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}))
    failed = stream.fail("upstream broke", "overloaded_error")
    assert failed == [
        {"type": "error", "error": {"type": "overloaded_error", "message": "upstream broke"}}
    ]
    assert stream.finish() == []
    with pytest.raises(ValueError):
        stream.feed(chunk({"content": "x"}))


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(frame(event) for event in events)


def test_anthropic_sdk_parses_the_translated_stream() -> None:
    client = anthropic_client(Canned(sse(to_messages_events(CHUNKS)), is_stream=True))
    with client.messages.stream(
        model="local", max_tokens=64, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Calling f."
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    tool = final.content[2]
    assert tool.type == "tool_use" and tool.input == {"a": 1}
    assert final.stop_reason == "tool_use"
    assert final.usage.cache_read_input_tokens == 2048 and final.usage.output_tokens == 12
    # A broken stream: the SDK raises rather than ending silently.
    stream_state = ChatToMessagesStream(model="local")
    broken = stream_state.start() + stream_state.feed(CHUNKS[2]) + stream_state.fail("cut")
    client = anthropic_client(Canned(sse(broken), is_stream=True))
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(
            model="local", max_tokens=64, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            stream.get_final_message()


def test_anthropic_sdk_tool_use_round_trip_through_chat() -> None:
    """Turn 1: the chat upstream calls a tool; turn 2: the SDK sends its result back,
    which reaches the chat upstream as a tool message answering that call."""
    first = chat_body(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"x": 2}'},
                }
            ],
        },
        "tool_calls",
    )
    canned = Canned(orjson.dumps(chat_body_to_messages(first, message_id=MESSAGE_ID)))
    client = anthropic_client(canned)
    tools: Any = [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]
    history: Any = [{"role": "user", "content": "double 2"}]
    reply = client.messages.create(model="local", max_tokens=64, messages=history, tools=tools)
    call = reply.content[0]
    assert call.type == "tool_use" and call.id == "call_9" and call.input == {"x": 2}
    canned.body = orjson.dumps(
        chat_body_to_messages(
            chat_body({"role": "assistant", "content": "4"}), message_id=MESSAGE_ID
        )
    )
    history += [
        {"role": "assistant", "content": reply.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "4"}],
        },
    ]
    answer = client.messages.create(model="local", max_tokens=64, messages=history, tools=tools)
    assert answer.content[0].type == "text" and answer.content[0].text == "4"
    sent = canned.requests[-1]
    check_request(sent)
    chat = messages_request_to_chat(sent)
    assert chat["messages"][1]["tool_calls"][0]["id"] == "call_9"
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "call_9", "content": "4"}


# --- Messages streams as chat streams ---------------------------------------------------

MESSAGE = messages.new_message(
    message_id=MESSAGE_ID,
    model="claude-test",
    content=[
        {"type": "thinking", "thinking": "Let me think.", "signature": "c2ln"},
        {"type": "text", "text": "Calling two tools."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
        {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
    ],
    stop_reason="tool_use",
    usage=Usage(1500, 30, 1024, 256),
)


def to_chat_chunks(message: dict[str, Any], include_usage: bool = True) -> list[dict[str, Any]]:
    stream = MessagesToChatStream(created=NOW, include_usage=include_usage)
    chunks: list[dict[str, Any]] = []
    for event in body_to_events(orjson.dumps(message)):
        chunks += stream.feed(event)
    return chunks + stream.finish()


def test_messages_stream_as_chat_chunks() -> None:
    chunks = to_chat_chunks(MESSAGE)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (
        chunks[-1]["choices"] == []
        and chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 1024
    )
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert [call["index"] for call in calls] == [0, 0, 1, 1]
    assert calls[0]["id"] == "toolu_1" and calls[0]["function"]["name"] == "f"
    merge = BodyMerge(CHAT)
    for item in chunks:
        merge.add(item)
    merged = orjson.loads(merge.body())
    expected = messages_body_to_chat(MESSAGE, created=NOW)
    assert (
        merged["choices"][0]["message"]["tool_calls"]
        == expected["choices"][0]["message"]["tool_calls"]
    )
    assert (
        merged["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    )
    assert merged["choices"][0]["message"]["reasoning_content"] == "Let me think."
    assert merged["usage"] == expected["usage"]
    assert all("usage" not in item for item in to_chat_chunks(MESSAGE, include_usage=False))


def test_messages_stream_error_and_fail() -> None:
    stream = MessagesToChatStream(created=NOW)
    stream.feed(body_to_events(orjson.dumps(MESSAGE))[0])
    with pytest.raises(ValueError):
        stream.feed(messages.error_event("Overloaded", "overloaded_error"))
    assert stream.fail("Overloaded", "overloaded_error") == [
        {
            "error": {
                "message": "Overloaded",
                "type": "server_error",
                "param": None,
                "code": "overloaded_error",
            }
        }
    ]


def chat_sse(chunks: list[dict[str, Any]]) -> bytes:
    return (
        b"".join(b"data: " + orjson.dumps(item) + b"\n\n" for item in chunks) + b"data: [DONE]\n\n"
    )


def test_openai_sdk_parses_the_translated_chat_stream() -> None:
    client = openai_client(Canned(chat_sse(to_chat_chunks(MESSAGE)), is_stream=True))
    with client.chat.completions.stream(
        model="claude-test", messages=[{"role": "user", "content": "go"}]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Calling two tools."
    assert message.tool_calls is not None
    assert [
        (call.id, call.function.name, call.function.arguments) for call in message.tool_calls
    ] == [
        ("toolu_1", "f", '{"a":1}'),
        ("toolu_2", "g", "{}"),
    ]
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.prompt_tokens == 1500
    client = openai_client(Canned(orjson.dumps(messages_body_to_chat(MESSAGE, created=NOW))))
    whole = client.chat.completions.create(
        model="claude-test", messages=[{"role": "user", "content": "go"}]
    )
    assert whole.choices[0].message.content == "Calling two tools."
    assert whole.usage is not None and whole.usage.prompt_tokens_details is not None
    assert whole.usage.prompt_tokens_details.cached_tokens == 1024


def test_a_system_turn_mid_conversation_becomes_a_chat_system_message() -> None:
    """Claude Code 2.1 sends its agent list as a system turn between user turns."""
    body = {
        "model": "m",
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "agents: a, b"}]},
        ],
    }
    check_request(body)
    chat = messages_request_to_chat(body)
    assert chat["messages"][-1] == {"role": "system", "content": "agents: a, b"}

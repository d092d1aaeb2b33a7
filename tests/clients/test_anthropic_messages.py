"""The Anthropic SDK on the Messages API through hasten, translated and passed through:
every streamed event parsed (text and tool use), a tool-use round trip, ``count_tokens``,
and a repeated request served from the cache under a fresh ``msg_`` id when the model is
configured ``deterministic_only = false`` (the SDK sends no temperature)."""

from __future__ import annotations

import typing
from typing import Any

import anthropic
from anthropic.types import RawMessageStreamEvent

from tests.support.servers import ServerThread

MODEL = "sim-model"
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
RAW_EVENT_CLASSES = typing.get_args(typing.get_args(RawMessageStreamEvent)[0])
# The simulator's chat endpoint runs every answer to its max_tokens (the Messages API
# requires one), so through the chat-only upstream an answer stops at the limit.
ENDED = ("end_turn", "max_tokens")


def _client(gateway: ServerThread) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="sk-test", max_retries=0)


def _ask(text: str) -> list[anthropic.types.MessageParam]:
    return [{"role": "user", "content": text}]


def _check_raw_events(events: list[Any]) -> None:
    unknown = [e for e in events if not isinstance(e, RAW_EVENT_CLASSES)]
    assert not unknown, unknown
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta" and events[-2].delta.stop_reason is not None
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == list(range(len(starts)))


def test_create_then_the_same_request_is_a_hit_with_a_fresh_id(
    any_sampling_gateway: ServerThread,
) -> None:
    client = _client(any_sampling_gateway)
    ask: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": _ask("Capital of Peru?")}
    first = client.messages.with_raw_response.create(**ask)
    again = client.messages.with_raw_response.create(**ask)
    assert first.headers["x-hasten-cache"] == "miss" and again.headers["x-hasten-cache"] == "hit"
    miss, hit = first.parse(), again.parse()
    assert miss.id.startswith("msg_") and hit.id.startswith("msg_") and hit.id != miss.id
    assert hit.content == miss.content and miss.content
    assert hit.stop_reason == miss.stop_reason and miss.stop_reason in ENDED
    assert hit.usage.output_tokens == miss.usage.output_tokens


def test_without_that_setting_a_request_without_temperature_is_not_cached(
    gateway: ServerThread,
) -> None:
    client = _client(gateway)
    ask: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": _ask("Not kept")}
    client.messages.create(**ask)
    again = client.messages.with_raw_response.create(**ask)
    assert again.headers["x-hasten-cache"] != "hit"
    cached = client.messages.with_raw_response.create(extra_body={"temperature": 0}, **ask)
    assert cached.headers["x-hasten-cache"] == "miss"
    hit = client.messages.with_raw_response.create(extra_body={"temperature": 0}, **ask)
    assert hit.headers["x-hasten-cache"] == "hit"


def test_stream_parses_every_event_and_its_repeat_is_a_hit(
    any_sampling_gateway: ServerThread,
) -> None:
    client = _client(any_sampling_gateway)
    ask: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "system": "be brief",
        "messages": _ask("Stream the capital of Chile"),
    }
    with client.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    text = "".join(e.text for e in events if e.type == "text")
    assert text and final.content[0].type == "text" and final.content[0].text == text
    with client.messages.with_streaming_response.create(stream=True, **ask) as raw:
        assert raw.headers["x-hasten-cache"] == "hit"
        replayed = list(raw.parse())
    _check_raw_events(replayed)
    start = replayed[0]
    assert start.type == "message_start" and start.message.id != final.id
    assert start.message.id.startswith("msg_")
    deltas = [e.delta for e in replayed if e.type == "content_block_delta"]
    assert "".join(d.text for d in deltas if d.type == "text_delta") == text


def test_a_tool_use_round_trip_streamed_and_not(any_sampling_gateway: ServerThread) -> None:
    client = _client(any_sampling_gateway)
    history: list[Any] = [*_ask("What is the weather in Lima?")]
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=history, tools=[WEATHER]
    ) as stream:
        events = list(stream)
        asked = stream.get_final_message()
    assert asked.stop_reason in ("tool_use", "max_tokens")
    (call,) = asked.content
    assert call.type == "tool_use" and call.name == "get_weather"
    assert isinstance(call.input, dict) and call.input["city"]
    partial = "".join(e.partial_json for e in events if e.type == "input_json")
    assert partial and all(e.type != "text" for e in events)
    history += [
        {"role": "assistant", "content": [block.model_dump() for block in asked.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    answered = client.messages.create(model=MODEL, max_tokens=64, messages=history, tools=[WEATHER])
    assert answered.stop_reason in ENDED
    assert [block.type for block in answered.content] == ["text"]


def test_count_tokens_counts_the_tools_too(gateway: ServerThread) -> None:
    client = _client(gateway)
    bare = client.messages.count_tokens(model=MODEL, messages=_ask("How many tokens?"))
    with_tools = client.messages.count_tokens(
        model=MODEL, messages=_ask("How many tokens?"), tools=[WEATHER]
    )
    assert 0 < bare.input_tokens < with_tools.input_tokens


async def test_the_async_client_streams_the_same_answer(
    any_sampling_gateway: ServerThread,
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=any_sampling_gateway.url, api_key="sk-test", max_retries=0
    )
    ask: dict[str, Any] = {"model": MODEL, "max_tokens": 32, "messages": _ask("async one")}
    whole = await client.messages.create(**ask)
    stream = await client.messages.create(stream=True, **ask)
    events = [event async for event in stream]
    _check_raw_events(events)
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    text = "".join(d.text for d in deltas if d.type == "text_delta")
    assert whole.content[0].type == "text" and whole.content[0].text == text
    await client.close()

"""The openai SDK on the Responses API through hasten, translated and passed through: every
streamed event parsed into its typed class, a function tool round trip, and a repeated
deterministic request served from the cache under a fresh ``resp_`` id."""

from __future__ import annotations

import typing
from typing import Any

import openai
import orjson
from openai.types.responses import ResponseStreamEvent

from tests.support.servers import ServerThread

MODEL = "sim-model"
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
# Every class the SDK parses a stream event into: an event it does not know would not be one.
STREAM_EVENT_CLASSES = typing.get_args(typing.get_args(ResponseStreamEvent)[0])


def _client(gateway: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)


def _check_events(events: list[Any]) -> None:
    assert events, "no events"
    unknown = [e for e in events if not isinstance(e, STREAM_EVENT_CLASSES)]
    assert not unknown, unknown
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"


def test_create_then_the_same_request_is_a_hit_with_a_fresh_id(gateway: ServerThread) -> None:
    client = _client(gateway)
    ask: dict[str, Any] = {"model": MODEL, "input": "The capital of France?", "temperature": 0}
    first = client.responses.with_raw_response.create(**ask)
    again = client.responses.with_raw_response.create(**ask)
    assert first.headers["x-hasten-cache"] == "miss" and again.headers["x-hasten-cache"] == "hit"
    miss, hit = first.parse(), again.parse()
    assert miss.id.startswith("resp_") and hit.id.startswith("resp_") and hit.id != miss.id
    assert miss.status == hit.status == "completed"
    assert hit.output_text == miss.output_text != ""
    assert hit.usage is not None and hit.usage.output_tokens == miss.usage.output_tokens


def test_stream_parses_every_event_and_its_repeat_is_a_renumbered_hit(
    gateway: ServerThread,
) -> None:
    client = _client(gateway)
    ask: dict[str, Any] = {
        "model": MODEL,
        "input": "Stream the capital of Spain",
        "instructions": "be brief",
        "temperature": 0,
    }
    with client.responses.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_response()
    _check_events(events)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text != ""
    last: Any = events[-1]
    assert last.response.id == final.id
    with client.responses.with_streaming_response.create(stream=True, **ask) as raw:
        assert raw.headers["x-hasten-cache"] == "hit"
        replayed = list(raw.parse())
    _check_events(replayed)
    last = replayed[-1]
    assert last.type == "response.completed"
    assert last.response.output_text == final.output_text and last.response.id != final.id
    assert last.response.id.startswith("resp_")


def test_a_function_tool_round_trip(gateway: ServerThread) -> None:
    client = _client(gateway)
    question: Any = {"role": "user", "content": "What is the weather in Paris?"}
    asked = client.responses.create(
        model=MODEL, input=[question], tools=[WEATHER], temperature=0, store=False
    )
    (call,) = asked.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert orjson.loads(call.arguments)["city"]
    assert call.call_id.startswith("call_")
    result: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    history = [question, call.model_dump(exclude_none=True), result]
    answered = client.responses.create(
        model=MODEL, input=history, tools=[WEATHER], temperature=0, store=False
    )
    assert answered.output_text and answered.status == "completed"
    assert all(item.type == "message" for item in answered.output)


def test_a_streamed_function_call_gives_its_arguments_in_deltas(gateway: ServerThread) -> None:
    client = _client(gateway)
    with client.responses.stream(
        model=MODEL, input="Weather in Rome, streamed", tools=[WEATHER], temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    _check_events(events)
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    (call,) = final.output
    assert call.type == "function_call"
    assert "".join(deltas) == done.arguments == call.arguments
    assert orjson.loads(call.arguments)["city"]


def test_previous_response_id_continues_the_conversation(gateway: ServerThread) -> None:
    """Translated, hasten expands the stored conversation; passed through, the upstream
    that answered holds the id and gets it. The SDK reads either the same way."""
    client = _client(gateway)
    first = client.responses.create(model=MODEL, input="Remember the word walnut.")
    second = client.responses.create(
        model=MODEL, input="Which word?", previous_response_id=first.id
    )
    assert second.status == "completed" and second.output_text
    assert second.previous_response_id == first.id
    with client.responses.stream(
        model=MODEL, input="Again?", previous_response_id=second.id
    ) as stream:
        events = list(stream)
        third = stream.get_final_response()
    _check_events(events)
    assert third.previous_response_id == second.id and third.output_text
    items = client.responses.input_items.list(third.id, order="asc")
    said = [
        part.text
        for item in items.data
        if item.type == "message"
        for part in item.content
        if part.type in ("input_text", "output_text")
    ]
    assert said[0] == "Remember the word walnut." and said[-1] == "Again?"


async def test_the_async_client_streams_the_same_answer(gateway: ServerThread) -> None:
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)
    ask: dict[str, Any] = {"model": MODEL, "input": "async question", "temperature": 0}
    whole = await client.responses.create(**ask)
    stream = await client.responses.create(stream=True, **ask)
    events = [event async for event in stream]
    _check_events(events)
    assert events[-1].response.output_text == whole.output_text
    await client.close()

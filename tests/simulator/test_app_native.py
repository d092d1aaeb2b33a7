"""The simulator's Responses and Messages endpoints on loopback, driven by the official
openai and anthropic SDKs: streams and whole answers, tools, stored responses, the
provider prefix caches, faults in each API's own shape, and the counters.

No test asserts how long anything took: the prefix caches' effect on the time to first
token is checked on the latency plan they produce.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from openai.types.responses import ResponseFailedEvent

from hasten.simulator import SimConfig, build_app
from hasten.simulator.inputs import NO_OVERRIDES
from hasten.simulator.native import parse_messages, parse_responses
from tests.support.servers import ServerThread

MODEL = "sim-model"
TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]
LONG = " ".join(f"rule{i}" for i in range(200))
CONFIG = SimConfig(messages_cache_min_tokens=64)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(build_app(CONFIG)) as srv:
        yield srv


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url) as client:
        client.post("/sim/config", json=CONFIG.to_dict()).raise_for_status()
        client.post("/sim/reset?clear_prefix_cache=1").raise_for_status()
        yield client


@pytest.fixture
def oai(http: httpx.Client, server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(http: httpx.Client, server: ServerThread) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0) as client:
        yield client


def stats(http: httpx.Client) -> dict[str, Any]:
    data: dict[str, Any] = http.get("/sim/stats").json()
    return data


def wait_for(http: httpx.Client, **expected: int) -> dict[str, Any]:
    """The counters once they match: a server notices a disconnect after the client."""
    deadline = time.monotonic() + 10
    while True:
        data = stats(http)
        if all(data[key] == value for key, value in expected.items()):
            return data
        if time.monotonic() > deadline:
            pytest.fail(f"stats never reached {expected}: {data}")
        time.sleep(0.02)


# --- Responses --------------------------------------------------------------------------


def test_responses_whole_and_streamed_agree(oai: openai.OpenAI, http: httpx.Client) -> None:
    whole = oai.responses.create(
        model=MODEL, input="tell me about the sea", instructions="be brief"
    )
    with oai.responses.stream(
        model=MODEL, input="tell me about the sea", instructions="be brief"
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert whole.output_text and whole.output_text == final.output_text == "".join(deltas)
    assert whole.id.startswith("resp_") and whole.id != final.id
    assert len(deltas) == CONFIG.output_tokens
    assert whole.usage is not None and whole.usage.output_tokens == CONFIG.output_tokens
    assert whole.status == "completed" and final.status == "completed"
    data = stats(http)
    assert data["num_requests_by_endpoint"] == {"responses": 2}
    assert data["num_completed"] == 2 and data["num_stream_requests"] == 1


def test_responses_stream_parses_every_event(oai: openai.OpenAI) -> None:
    events = list(oai.responses.create(model=MODEL, input="hi", stream=True, max_output_tokens=5))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details is not None
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_responses_function_tool_round_trip_with_previous_response_id(oai: openai.OpenAI) -> None:
    first = oai.responses.create(model=MODEL, input="weather in Paris?", tools=TOOLS)
    call = first.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert orjson.loads(call.arguments)["city"]  # its schema's string property
    follow_up = oai.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=TOOLS,
        tool_choice="none",
    )
    assert follow_up.output_text and follow_up.previous_response_id == first.id
    # The stored conversation was continued: its prefix is in the provider cache.
    assert follow_up.usage is not None and follow_up.usage.input_tokens_details.cached_tokens > 0
    retrieved = oai.responses.retrieve(first.id)
    assert retrieved.id == first.id and retrieved.output[0].type == "function_call"
    items = oai.responses.input_items.list(follow_up.id)
    assert [item.type for item in items.data][:2] == ["function_call_output", "function_call"]
    oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=MODEL, previous_response_id=first.id, input="again")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_responses_continuations_are_counted_by_id_or_resent_whole(
    oai: openai.OpenAI, http: httpx.Client
) -> None:
    def counted() -> tuple[int, int]:
        stats = http.get("/sim/stats").json()
        return stats["num_previous_response_ids"], stats["num_resent_histories"]

    start = counted()
    first = oai.responses.create(model=MODEL, input="hi")
    assert counted() == start  # a first turn continues nothing
    oai.responses.create(model=MODEL, input="more", previous_response_id=first.id)
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model=MODEL, input="more", previous_response_id="resp_unknown")
    whole = [
        {"role": "user", "content": "hi"},
        *first.model_dump()["output"],
        {"role": "user", "content": "more"},
    ]
    oai.responses.create(model=MODEL, input=whole)
    assert counted() == (start[0] + 2, start[1] + 1)


def test_responses_store_false_keeps_nothing(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model=MODEL, input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(response.id)


def test_responses_prefix_cache_reports_cached_tokens(
    oai: openai.OpenAI, http: httpx.Client
) -> None:
    first = oai.responses.create(model=MODEL, input="question one", instructions=LONG, tools=TOOLS)
    second = oai.responses.create(model=MODEL, input="question two", instructions=LONG, tools=TOOLS)
    assert first.usage is not None and second.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    block = CONFIG.prefix_block_tokens
    assert cached > 200 and cached % block == 0 and cached <= second.usage.input_tokens
    assert stats(http)["num_prefix_cache_hit_tokens"] == cached


def test_responses_errors_and_faults_are_openai_shaped(
    oai: openai.OpenAI, http: httpx.Client
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=MODEL, input="x", temperature=5)
    assert caught.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as background:
        oai.responses.create(model=MODEL, input="x", background=True)
    assert background.value.param == "background"
    limited = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "x"},
        headers={"x-sim-fail": "429", "x-sim-retry-after": "2"},
    )
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json()["error"]["type"] == "rate_limit_error"
    broken = oai.responses.create(
        model=MODEL,
        input="x",
        stream=True,
        extra_headers={"x-sim-fail": "500", "x-sim-fail-after-chunks": "6"},
    )
    events = list(broken)
    assert len(events) == 7 and isinstance(events[-1], ResponseFailedEvent)
    assert events[-1].sequence_number == 6
    assert events[-1].response.output[0].type == "message"
    data = stats(http)
    assert data["num_errors_injected"] == 1 and data["num_rate_limited"] == 1
    assert data["num_bad_requests"] == 2


def test_responses_broken_streams_never_look_whole(oai: openai.OpenAI, http: httpx.Client) -> None:
    with pytest.raises(openai.APIConnectionError):
        with oai.responses.stream(
            model=MODEL, input="x", extra_headers={"x-sim-fail": "disconnect"}
        ) as stream:
            stream.get_final_response()
    # Cut mid-event, the stream lacks its terminal event; the SDK says so.
    with pytest.raises(RuntimeError, match=r"response\.completed"):
        with oai.responses.stream(
            model=MODEL, input="x", extra_headers={"x-sim-fail": "truncate"}
        ) as stream:
            stream.get_final_response()
    with pytest.raises(ValueError):
        with oai.responses.stream(
            model=MODEL, input="x", extra_headers={"x-sim-fail": "malformed"}
        ) as stream:
            stream.get_final_response()
    data = wait_for(http, num_disconnects=1, num_corrupted=2)
    assert data["num_requests"] == 3


def test_paths_without_v1(http: httpx.Client) -> None:
    answer = http.post("/responses", json={"model": MODEL, "input": "x"})
    assert answer.status_code == 200 and answer.json()["object"] == "response"
    message = http.post(
        "/messages",
        json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    assert message.status_code == 200 and message.json()["type"] == "message"
    counted = http.post(
        "/messages/count_tokens",
        json={"model": MODEL, "messages": [{"role": "user", "content": "a b"}]},
    )
    assert counted.json() == {"input_tokens": 3}
    assert http.post("/nowhere", json={}).status_code == 404


# --- Messages ---------------------------------------------------------------------------


def test_messages_whole_and_streamed_agree(claude: anthropic.Anthropic, http: httpx.Client) -> None:
    history: Any = [{"role": "user", "content": "tell me about the sea"}]
    whole = claude.messages.create(model=MODEL, max_tokens=100, messages=history, system="be brief")
    with claude.messages.stream(
        model=MODEL, max_tokens=100, messages=history, system="be brief"
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert whole.content[0].type == "text" and whole.content[0].text == text
    assert final.content[0].type == "text" and final.content[0].text == text
    assert whole.id.startswith("msg_01") and whole.stop_reason == "end_turn"
    assert whole.usage.output_tokens == final.usage.output_tokens == CONFIG.output_tokens
    counted = claude.messages.count_tokens(model=MODEL, messages=history, system="be brief")
    assert counted.input_tokens == whole.usage.input_tokens
    assert stats(http)["num_requests_by_endpoint"] == {"messages": 2, "messages.count_tokens": 1}


def test_messages_tool_use_round_trip(claude: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]
    history: Any = [{"role": "user", "content": "weather?"}]
    with claude.messages.stream(
        model=MODEL, max_tokens=100, messages=history, tools=tools
    ) as stream:
        reply = stream.get_final_message()
    assert reply.stop_reason == "tool_use"
    call = reply.content[0]
    assert call.type == "tool_use" and call.name == "get_weather" and "text" in call.input
    history += [
        {"role": "assistant", "content": reply.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    answer = claude.messages.create(
        model=MODEL, max_tokens=100, messages=history, tools=tools, tool_choice={"type": "none"}
    )
    assert answer.stop_reason == "end_turn" and answer.content[0].type == "text"


def test_messages_stop_sequence_and_max_tokens(claude: anthropic.Anthropic) -> None:
    history: Any = [{"role": "user", "content": "go on"}]
    free = claude.messages.create(model=MODEL, max_tokens=100, messages=history)
    assert free.content[0].type == "text"
    words = free.content[0].text.split()
    stopped = claude.messages.create(
        model=MODEL, max_tokens=100, messages=history, stop_sequences=[words[3]]
    )
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == words[3]
    capped = claude.messages.create(model=MODEL, max_tokens=3, messages=history)
    assert capped.stop_reason == "max_tokens" and capped.usage.output_tokens == 3
    prefilled = claude.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[*history, {"role": "assistant", "content": " ".join(words[:2])}],
    )
    assert prefilled.content[0].type == "text"
    assert free.content[0].text.startswith(" ".join(words[:2]) + prefilled.content[0].text)


def test_messages_cache_follows_cache_control(
    claude: anthropic.Anthropic, http: httpx.Client
) -> None:
    plain: Any = [{"type": "text", "text": LONG}]
    marked: Any = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    ask: Any = [{"role": "user", "content": "q"}]
    for _ in range(2):
        reply = claude.messages.create(model=MODEL, max_tokens=5, system=plain, messages=ask)
        assert (
            reply.usage.cache_read_input_tokens == 0
            and reply.usage.cache_creation_input_tokens == 0
        )
    first = claude.messages.create(model=MODEL, max_tokens=5, system=marked, messages=ask)
    second = claude.messages.create(
        model=MODEL, max_tokens=5, system=marked, messages=[{"role": "user", "content": "other"}]
    )
    system_tokens = 201  # the marker and 200 words
    assert (first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens) == (
        system_tokens,
        0,
    )
    assert (second.usage.cache_creation_input_tokens, second.usage.cache_read_input_tokens) == (
        0,
        system_tokens,
    )
    assert second.usage.input_tokens == 2  # the user turn: its marker and one word
    short: Any = [{"type": "text", "text": "tiny", "cache_control": {"type": "ephemeral"}}]
    below = claude.messages.create(model=MODEL, max_tokens=5, system=short, messages=ask)
    assert below.usage.cache_creation_input_tokens == 0  # under messages_cache_min_tokens
    assert stats(http)["num_prefix_cache_hit_tokens"] == system_tokens


def test_messages_errors_and_faults_are_anthropic_shaped(
    claude: anthropic.Anthropic, http: httpx.Client
) -> None:
    ask: Any = [{"role": "user", "content": "x"}]
    bad = http.post("/v1/messages", json={"model": MODEL, "messages": ask})
    assert bad.status_code == 400
    assert bad.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "Missing required parameter: 'max_tokens'.",
        },
    }
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(
            model=MODEL, max_tokens=5, messages=ask, extra_headers={"x-sim-fail": "429"}
        )
    assert limited.value.response.headers["retry-after"] == "1"
    http.post("/sim/burst", json={"num_requests": 1, "status": 529}).raise_for_status()
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        claude.messages.create(model=MODEL, max_tokens=5, messages=ask)
    assert overloaded.value.body == {
        "type": "error",
        "error": {
            "type": "overloaded_error",
            "message": "The server had an error while processing your request.",
        },
    }
    with pytest.raises(anthropic.APIStatusError) as mid_stream:
        with claude.messages.stream(
            model=MODEL,
            max_tokens=5,
            messages=ask,
            extra_headers={"x-sim-fail": "500", "x-sim-fail-after-chunks": "4"},
        ) as stream:
            stream.get_final_message()
    assert "error while processing" in str(mid_stream.value)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model=MODEL, max_tokens=5, messages=ask, extra_headers={"x-sim-fail": "sometimes"}
        )
    data = stats(http)
    assert data["num_rate_limited"] == 1 and data["num_errors_injected"] == 2
    assert data["num_bad_requests"] == 2


def test_messages_malformed_event(http: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    raw = http.post(
        "/v1/messages",
        json=body,
        headers={"x-sim-fail": "malformed", "x-sim-fail-after-chunks": "3"},
    )
    events = raw.text.split("\n\n")
    assert events[3].startswith("event: content_block_delta\ndata: {") and not events[3].endswith(
        "}"
    )
    assert events[-2].startswith("event: message_stop")
    assert stats(http)["num_corrupted"] == 1


# --- the caches' effect on latency, on the plan ---------------------------------------------


def test_cached_prefixes_lower_the_planned_time_to_first_token() -> None:
    config = SimConfig(
        ttft_base_ms=20,
        prefill_ms_per_token=1.0,
        prefill_cached_ms_per_token=0.1,
        messages_cache_min_tokens=64,
    )
    app = build_app(config)
    native = parse_responses({"model": MODEL, "input": "q", "instructions": LONG}, [])
    cold = app._prepare_native(native, NO_OVERRIDES).completion.plan.first_token_ms
    warm = app._prepare_native(native, NO_OVERRIDES).completion.plan.first_token_ms
    assert cold == 20 + len(native.prompt_tokens)
    assert warm < cold / 2
    system: Any = [
        {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    request = {
        "model": MODEL,
        "max_tokens": 5,
        "system": system,
        "messages": [{"role": "user", "content": "q"}],
    }
    message = parse_messages(request)
    first = app._prepare_native(message, NO_OVERRIDES)
    second = app._prepare_native(message, NO_OVERRIDES)
    assert (first.usage.cache_creation_input_tokens, second.usage.cached_input_tokens) == (201, 201)
    assert second.completion.plan.first_token_ms < first.completion.plan.first_token_ms / 2

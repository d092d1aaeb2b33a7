"""Loopback tests of the simulator: the official openai SDK and raw httpx against a real server.

Behaviour is forced with `x-sim-*` headers and checked through `/sim/stats` counts; no test
asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from hasten.simulator import SimConfig, build_app
from tests.support.servers import ServerThread

MODEL = "sim-model"
MESSAGES: list[Any] = [{"role": "user", "content": "tell me about the sea"}]
LONG_PROMPT = " ".join(f"word{i}" for i in range(100))


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as srv:
        yield srv


@pytest.fixture(scope="module")
def shared_http(server: ServerThread) -> Iterator[httpx.Client]:
    # One client for the module: building a client per call costs more than the call.
    with httpx.Client(base_url=server.url) as http:
        yield http


@pytest.fixture(scope="module")
def shared_client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture
def http(shared_http: httpx.Client) -> httpx.Client:
    """A clean simulator per test: default config, zeroed counters, empty prefix cache."""
    shared_http.post("/sim/config", json=SimConfig().to_dict()).raise_for_status()
    shared_http.post("/sim/reset?clear_prefix_cache=1").raise_for_status()
    return shared_http


@pytest.fixture
def client(http: httpx.Client, shared_client: openai.OpenAI) -> openai.OpenAI:
    return shared_client


def stats(http: httpx.Client) -> dict[str, Any]:
    data: dict[str, Any] = http.get("/sim/stats").json()
    return data


def wait_for_stats(http: httpx.Client, **expected: int) -> dict[str, Any]:
    """Polls until the counters match: the server notices disconnects asynchronously."""
    deadline = time.monotonic() + 10
    while True:
        current = stats(http)
        if all(current[key] == value for key, value in expected.items()):
            return current
        if time.monotonic() > deadline:
            pytest.fail(f"stats never reached {expected}: {current}")
        time.sleep(0.02)


def assert_outcomes_add_up(data: dict[str, Any]) -> None:
    outcomes = (
        "num_completed",
        "num_cancelled",
        "num_errors_injected",
        "num_rate_limited",
        "num_disconnects",
        "num_bad_requests",
        "num_in_flight",
    )
    assert data["num_requests"] == sum(data[key] for key in outcomes)


# --- chat completions ----------------------------------------------------------------------


def test_chat_is_deterministic_per_prompt_and_seed(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    again = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    other = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "tell me about the sky"}]
    )
    seeded = client.chat.completions.create(model=MODEL, messages=MESSAGES, seed=7)
    assert first.object == "chat.completion"
    text = first.choices[0].message.content
    assert text and len(text.split()) == 16
    assert again.choices[0].message.content == text
    assert other.choices[0].message.content != text
    assert seeded.choices[0].message.content != text
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None
    assert first.usage.completion_tokens == 16
    assert first.usage.prompt_tokens == 6  # role marker + 5 words


def test_chat_honours_max_tokens_n_and_stop(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_completion_tokens=5, n=3
    )
    assert [choice.index for choice in response.choices] == [0, 1, 2]
    assert all(choice.finish_reason == "length" for choice in response.choices)
    assert all(len((c.message.content or "").split()) == 5 for c in response.choices)
    assert response.usage is not None and response.usage.completion_tokens == 15
    full = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    fourth_word = (full.choices[0].message.content or "").split()[3]
    stopped = client.chat.completions.create(model=MODEL, messages=MESSAGES, stop=[fourth_word])
    stopped_text = stopped.choices[0].message.content or ""
    assert stopped.choices[0].finish_reason == "stop"
    assert fourth_word not in stopped_text
    assert (full.choices[0].message.content or "").startswith(stopped_text)


def test_chat_stream_with_several_choices(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, n=2, max_tokens=3
        )
    )
    texts = ["", ""]
    finish_reasons: list[str | None] = [None, None]
    for chunk in chunks:
        (choice,) = chunk.choices
        texts[choice.index] += choice.delta.content or ""
        finish_reasons[choice.index] = choice.finish_reason or finish_reasons[choice.index]
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, n=2, max_tokens=3)
    assert texts == [choice.message.content for choice in whole.choices]
    assert finish_reasons == ["length", "length"]


def test_chat_stream_has_openai_chunk_shapes(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    content_chunks = chunks[1:-2]
    assert len(content_chunks) == 16
    text = "".join(chunk.choices[0].delta.content or "" for chunk in content_chunks)
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 16
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert whole.choices[0].message.content == text


def test_raw_stream_ends_with_done(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "stream": True, "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = response.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [orjson.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert [p["choices"][0]["delta"] for p in payloads] == [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": payloads[1]["choices"][0]["delta"]["content"]},
        {"content": payloads[2]["choices"][0]["delta"]["content"]},
        {},
    ]
    assert "usage" not in payloads[0]  # only present when include_usage is requested


# --- completions, embeddings, models -------------------------------------------------------


def test_text_completions_stream_and_not(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="once upon a time", max_tokens=4)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.prompt_tokens == 4
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="once upon a time",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_embeddings_are_normalized_and_deterministic(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    response = client.embeddings.create(model=MODEL, input=["red apple", "green pear"])
    vectors = [item.embedding for item in response.data]  # decoded from base64 by the SDK
    assert [len(v) for v in vectors] == [64, 64]
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-4
    assert vectors[0] != vectors[1]
    raw = http.post(
        "/v1/embeddings", json={"model": MODEL, "input": "red apple", "dimensions": 8}
    ).json()
    assert len(raw["data"][0]["embedding"]) == 8
    single = client.embeddings.create(model=MODEL, input="red apple", encoding_format="float")
    assert single.data[0].embedding == pytest.approx(vectors[0], abs=1e-6)
    assert stats(http)["num_embedding_inputs"] == 4


def test_models_list_and_lookup(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


# --- counters, control endpoints, prefix cache ---------------------------------------------


def test_stats_count_requests_tokens_and_reset(client: openai.OpenAI, http: httpx.Client) -> None:
    client.chat.completions.create(model=MODEL, messages=MESSAGES)
    list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    client.completions.create(model=MODEL, prompt="hi", max_tokens=3)
    client.models.list()
    data = stats(http)
    assert data["num_requests"] == 4
    assert data["num_requests_by_endpoint"] == {
        "chat.completions": 2,
        "completions": 1,
        "models": 1,
    }
    assert data["num_stream_requests"] == 1
    assert data["num_completed"] == 4 and data["num_in_flight"] == 0
    assert data["num_prompt_tokens"] == 6 + 6 + 1
    assert data["num_completion_tokens"] == 16 + 16 + 3
    assert_outcomes_add_up(data)
    reset = http.post("/sim/reset").json()
    assert reset["num_requests"] == 0 and reset["num_completion_tokens"] == 0


def test_prefix_cache_hits_are_reported(client: openai.OpenAI, http: httpx.Client) -> None:
    messages: list[Any] = [{"role": "user", "content": LONG_PROMPT}]  # 101 prompt tokens
    cold = client.chat.completions.create(model=MODEL, messages=messages)
    warm = client.chat.completions.create(model=MODEL, messages=messages)
    assert cold.usage is not None and warm.usage is not None
    assert cold.usage.prompt_tokens_details is not None
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert warm.usage.prompt_tokens_details is not None
    assert warm.usage.prompt_tokens_details.cached_tokens == 96  # six full 16-token blocks
    data = stats(http)
    assert data["num_prefix_cache_hit_tokens"] == 96
    assert data["prefix_cache_hit_ratio"] == pytest.approx(96 / 202)
    assert data["num_prefix_cache_blocks"] == 6


def test_config_can_be_read_and_changed_at_runtime(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    updated = http.post("/sim/config", json={"output_tokens": 3, "error_rate": 0.0})
    assert updated.status_code == 200 and updated.json()["output_tokens"] == 3
    assert http.get("/sim/config").json()["output_tokens"] == 3
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert response.usage is not None and response.usage.completion_tokens == 3
    bad = http.post("/sim/config", json={"error_rate": 2})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_config"
    assert http.get("/sim/config").json()["error_rate"] == 0.0


def test_configured_error_rate_injects_500s(client: openai.OpenAI, http: httpx.Client) -> None:
    http.post("/sim/config", json={"error_rate": 1.0}).raise_for_status()
    for _ in range(3):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    forced_ok = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, extra_headers={"x-sim-fail": "none"}
    )
    assert forced_ok.choices[0].message.content
    data = stats(http)
    assert data["num_errors_injected"] == 3 and data["num_completed"] == 1
    assert data["num_prompt_tokens"] == 6  # failed requests never reached "prefill"


# --- forced faults -------------------------------------------------------------------------


def test_forced_500_is_openai_shaped(http: httpx.Client) -> None:
    response = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES},
        headers={"x-sim-fail": "500"},
    )
    assert response.status_code == 500
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert stats(http)["num_errors_injected"] == 1


def test_forced_429_carries_retry_after(client: openai.OpenAI, http: httpx.Client) -> None:
    response = http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "hi"},
        headers={"x-sim-fail": "429", "x-sim-retry-after": "3"},
    )
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    assert response.headers["retry-after-ms"] == "3000"
    assert response.json()["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_headers={"x-sim-fail": "429"}
        )
    assert stats(http)["num_rate_limited"] == 2


def test_mid_stream_error_event(client: openai.OpenAI, http: httpx.Client) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        extra_headers={"x-sim-fail": "500", "x-sim-fail-after-chunks": "3"},
    )
    received = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.append(chunk)
    assert len(received) == 3
    data = stats(http)
    assert data["num_errors_injected"] == 1 and data["num_completion_tokens"] == 2


def test_forced_stream_disconnect_has_no_done(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    headers = {"x-sim-fail": "disconnect", "x-sim-fail-after-chunks": "4"}
    events: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        events.extend(line for line in response.iter_lines() if line)
    assert len(events) == 4 and "data: [DONE]" not in events
    data = wait_for_stats(http, num_disconnects=1, num_in_flight=0)
    assert data["num_completion_tokens"] == 3 and data["num_completed"] == 0


def test_forced_non_stream_disconnect_cuts_the_body(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": MESSAGES},
            headers={"x-sim-fail": "disconnect"},
        )
    with pytest.raises(openai.APIConnectionError):
        client.embeddings.create(model=MODEL, input="x", extra_headers={"x-sim-fail": "disconnect"})
    assert wait_for_stats(http, num_disconnects=2, num_in_flight=0)["num_completed"] == 0


# --- cancellation --------------------------------------------------------------------------


def test_client_leaving_a_slow_stream_is_counted_as_cancelled(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    headers = {"x-sim-decode-ms": "20", "x-sim-tokens": "10000"}
    with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp:
        lines = resp.iter_lines()
        first_events = [next(lines) for _ in range(4)]  # role, blank, first token, blank
    assert first_events[0].startswith("data: ")
    data = wait_for_stats(http, num_cancelled=1, num_in_flight=0)
    assert data["num_completed"] == 0
    assert 1 <= data["num_completion_tokens"] < 10000
    assert_outcomes_add_up(data)


def test_client_leaving_a_slow_non_stream_request_is_counted_as_cancelled(
    http: httpx.Client,
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": MESSAGES},
            headers={"x-sim-ttft-ms": "60000"},
            timeout=0.3,
        )
    data = wait_for_stats(http, num_cancelled=1, num_in_flight=0)
    assert data["num_completed"] == 0 and data["num_completion_tokens"] == 0


def test_rtt_delays_models_and_errors_but_not_control_paths(http: httpx.Client) -> None:
    # A real network delays every answer, so a client can see the RTT apart from the TTFT.
    http.post("/sim/config", json={"rtt_ms": 60_000}).raise_for_status()
    for method, path, payload in (
        ("GET", "/v1/models", None),
        ("GET", f"/v1/models/{MODEL}", None),
        ("POST", "/v1/chat/completions", b"{not json"),
    ):
        with pytest.raises(httpx.ReadTimeout):
            http.request(method, path, content=payload, timeout=0.3)
    data = wait_for_stats(http, num_cancelled=3, num_in_flight=0)
    assert data["num_completed"] == data["num_bad_requests"] == 0
    assert http.get("/sim/config", timeout=5).json()["rtt_ms"] == 60_000


def test_in_flight_counts_requests_waiting_out_latency(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    with http.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-sim-decode-ms": "20"}
    ) as response:
        # Keep the iterator: dropping it early makes httpx close the connection.
        lines = response.iter_lines()
        next(lines)
        assert stats(http)["num_in_flight"] == 1
        assert list(lines)[-2] == "data: [DONE]"
    wait_for_stats(http, num_in_flight=0, num_completed=1)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "status", "param"),
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b"[1, 2]", 400, None),
        ("/v1/chat/completions", b'{"model": "sim-model"}', 400, "messages"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}', 400, "model"),
        ("/v1/chat/completions", b'{"model": "m", "messages": [], "n": 1}', 400, "messages"),
        ("/v1/completions", b'{"model": "m", "prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
        ("/v1/embeddings", b'{"model": "m"}', 400, "input"),
        ("/v1/nothing-here", b"{}", 404, None),
    ],
)
def test_bad_requests_get_openai_errors(
    http: httpx.Client, path: str, payload: bytes, status: int, param: str | None
) -> None:
    response = http.post(path, content=payload)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    data = stats(http)
    assert data["num_bad_requests"] == 1
    assert_outcomes_add_up(data)


def test_wrong_method_bad_header_and_strict_models(http: httpx.Client) -> None:
    assert http.get("/v1/chat/completions").status_code == 405
    bad_header = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES},
        headers={"x-sim-tokens": "many"},
    )
    assert bad_header.status_code == 400
    assert bad_header.json()["error"]["param"] == "x-sim-tokens"
    http.post("/sim/config", json={"strict_models": True}).raise_for_status()
    unknown = http.post("/v1/chat/completions", json={"model": "gpt-unknown", "messages": MESSAGES})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert http.get("/sim/unknown").status_code == 404
    assert stats(http)["num_bad_requests"] == 3  # /sim/* paths are not counted


# --- concurrency ---------------------------------------------------------------------------


async def test_concurrent_streams_and_an_abandoned_one(
    server: ServerThread, http: httpx.Client
) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="test", max_retries=0
    ) as client:

        async def one_stream(index: int) -> str:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"question {index}"}],
                stream=True,
                extra_headers={"x-sim-decode-ms": "1", "x-sim-ttft-ms": "5"},
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        texts = await asyncio.gather(*(one_stream(index) for index in range(20)))
        assert len(set(texts)) == 20

        abandoned = await client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            extra_headers={"x-sim-decode-ms": "20", "x-sim-tokens": "10000"},
        )
        async for _ in abandoned:
            break
        await abandoned.close()
    data = await asyncio.to_thread(wait_for_stats, http, num_cancelled=1, num_in_flight=0)
    assert data["num_completed"] == 20 and data["num_stream_requests"] == 21


def straggled_by_trace(http: httpx.Client, parent_id: str, num_traces: int) -> list[int]:
    """For each of ``num_traces`` traced requests sent by caller ``parent_id``: 1 if the
    simulator drew a straggler for it (read from /sim/stats, not from any clock)."""
    drawn = []
    for index in range(num_traces):
        before = stats(http)["num_stragglers"]
        traceparent = f"00-{index + 1:032x}-{parent_id}-01"
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": MESSAGES},
            headers={"traceparent": traceparent},
        ).raise_for_status()
        drawn.append(stats(http)["num_stragglers"] - before)
    return drawn


def test_drawing_by_trace_pairs_two_callers_and_a_second_sending_draws_afresh(
    http: httpx.Client,
) -> None:
    http.post(
        "/sim/config",
        json={"ttft_base_ms": 0.1, "straggler_prob": 0.5, "straggler_mult": 2, "draw_by": "trace"},
    ).raise_for_status()
    caller_a = straggled_by_trace(http, "00f067aa0ba902b7", 40)
    assert 0 < sum(caller_a) < 40
    # Another system sending the same traces meets the same stragglers...
    assert straggled_by_trace(http, "1111111111111111", 40) == caller_a
    # ... while the first caller's second sending (a hedge, a retry) draws afresh.
    assert straggled_by_trace(http, "00f067aa0ba902b7", 40) != caller_a


def test_drawing_by_arrival_ignores_the_trace(http: httpx.Client) -> None:
    http.post(
        "/sim/config", json={"ttft_base_ms": 0.1, "straggler_prob": 0.5, "straggler_mult": 2}
    ).raise_for_status()
    caller_a = straggled_by_trace(http, "00f067aa0ba902b7", 40)
    assert straggled_by_trace(http, "1111111111111111", 40) != caller_a

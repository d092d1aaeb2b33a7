"""The real local model (SmolLM2-135M on llama-server) through hasten, driven by the openai
SDK, plus hybrid routing between it and simulated cloud upstreams."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import replace

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolParam,
)

from hasten.config import GatewayConfig, TimeoutConfig
from hasten.config.hybrid import HybridConfig
from hasten.served import served_config
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.gateway import make_config, running_gateway, sim_stats
from tests.support.servers import EngineProcess, ServerThread, free_port

SYSTEM: ChatCompletionSystemMessageParam = {
    "role": "system",
    "content": "You are a helpful assistant. Answer briefly.",
}
NO_CACHE = {"cache-control": "no-cache, no-store"}


def _ask(text: str) -> list[ChatCompletionMessageParam]:
    return [SYSTEM, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    flags = ("--n-ctx", "2048", "--n-threads", "1", "--max-seqs", "2")
    with EngineProcess(*flags) as running:
        yield running


@pytest.fixture(scope="module")
def local_server(engine: EngineProcess) -> EngineProcess:
    return engine


@pytest.fixture(scope="module")
def cloud() -> Iterator[ServerThread]:
    with ServerThread(build_sim(SimConfig())) as server:
        yield server


def _edge_config(cloud_url: str, local_url: str, hybrid: HybridConfig | None) -> GatewayConfig:
    config = make_config(
        {"cloud": cloud_url},
        models=("gpt-cloud",),
        timeouts=TimeoutConfig(first_byte_s=30, total_s=60),
    )
    config = replace(config, hybrid=hybrid)
    return served_config(config, local_url=local_url + "/v1")


@pytest.fixture(scope="module")
def gateway(cloud: ServerThread, local_server: EngineProcess) -> Iterator[ServerThread]:
    hybrid = HybridConfig(policy="local-first", cloud_model="gpt-cloud")
    with running_gateway(_edge_config(cloud.url + "/v1", local_server.url, hybrid)) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)


def _wait_idle(engine: EngineProcess, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (health := engine.health())["num_running"] or health["num_waiting"]:
        assert time.monotonic() < deadline, health
        time.sleep(0.02)


def test_local_model_non_stream_and_cached(client: openai.OpenAI) -> None:
    kwargs = {
        "model": "local",
        "messages": _ask("What is the capital of France?"),
        "temperature": 0,
        "max_tokens": 24,
    }
    first = client.chat.completions.with_raw_response.create(**kwargs)  # type: ignore[call-overload]
    second = client.chat.completions.with_raw_response.create(**kwargs)  # type: ignore[call-overload]
    assert first.headers["x-hasten-cache"] == "miss"
    assert first.headers["x-hasten-upstream"] == "local"
    assert second.headers["x-hasten-cache"] == "hit"
    text = first.parse().choices[0].message.content
    assert text and "Paris" in text
    assert second.parse().choices[0].message.content == text


def test_local_model_stream_max_tokens_and_stop(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="local",
        messages=_ask("Count from one to twenty in words."),
        temperature=0,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    full = client.chat.completions.create(
        model="local",
        messages=_ask("Count from one to ten in words."),
        temperature=0,
        max_tokens=40,
    )
    text = full.choices[0].message.content or ""
    word = text.split()[2] if len(text.split()) > 2 else text
    stopped = client.chat.completions.create(
        model="local",
        messages=_ask("Count from one to ten in words."),
        temperature=0,
        max_tokens=40,
        stop=[word],
        extra_headers=NO_CACHE,
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert word not in (stopped.choices[0].message.content or "")


def test_seed_reproducibility(client: openai.OpenAI) -> None:
    kwargs = {
        "model": "local",
        "messages": _ask("Tell me a one-line story."),
        "temperature": 0.9,
        "seed": 1234,
        "max_tokens": 20,
        "extra_headers": NO_CACHE,
    }
    one = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    two = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    assert one.choices[0].message.content == two.choices[0].message.content


async def test_concurrent_requests_all_complete(
    gateway: ServerThread, engine: EngineProcess
) -> None:
    _wait_idle(engine)
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=3)
    questions = ["Name a colour.", "Name a fruit."]
    replies = await asyncio.gather(
        *(
            client.chat.completions.create(
                model="local",
                messages=_ask(q),
                temperature=0,
                max_tokens=12,
            )
            for q in questions
        )
    )
    for reply in replies:
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.choices[0].message.content
    await client.close()


async def test_cancellation_frees_capacity(gateway: ServerThread, engine: EngineProcess) -> None:
    _wait_idle(engine)
    url = f"{gateway.url}/v1/chat/completions"
    long = {
        "model": "local",
        "messages": _ask("Write a long essay about rivers."),
        "temperature": 0.8,
        "max_tokens": 1000,
        "stream": True,
    }
    async with httpx.AsyncClient(timeout=60) as http:

        async def hold() -> None:
            async with http.stream("POST", url, json=long) as response:
                async for _ in response.aiter_bytes():
                    await asyncio.sleep(3600)  # hold the sequence until cancelled

        # Two sequences run and one request waits: the engine is full.
        holders = [asyncio.create_task(hold()) for _ in range(3)]
        deadline = time.monotonic() + 30
        while ((health := engine.health())["num_running"], health["num_waiting"]) != (2, 1):
            assert time.monotonic() < deadline, health
            await asyncio.sleep(0.02)
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        _wait_idle(engine)  # the disconnects freed every sequence at once
        after = await http.post(url, json={**long, "stream": False, "max_tokens": 4})
        assert after.status_code == 200


def test_local_first_sends_easy_local_and_hard_to_cloud(client: openai.OpenAI) -> None:
    easy = client.chat.completions.with_raw_response.create(
        model="auto", messages=_ask("Hi there!"), temperature=0, max_tokens=8
    )
    assert easy.headers["x-hasten-upstream"] == "local"
    assert easy.headers["x-hasten-hybrid"] == "local; reason=easy"
    hard = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=_ask("Look this up"),
        temperature=0,
        max_tokens=8,
        tools=[{"type": "function", "function": {"name": "search", "parameters": {}}}],
    )
    assert hard.headers["x-hasten-upstream"] == "cloud"
    assert hard.headers["x-hasten-hybrid"] == "cloud; reason=tools"


def test_cloud_first_falls_back_to_local_when_cloud_is_down(local_server: EngineProcess) -> None:
    hybrid = HybridConfig(policy="cloud-first", cloud_model="gpt-cloud")
    down = f"http://127.0.0.1:{free_port()}/v1"
    with running_gateway(_edge_config(down, local_server.url, hybrid)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.with_raw_response.create(
            model="auto", messages=_ask("What is 2+2?"), temperature=0, max_tokens=8
        )
    assert reply.status_code == 200
    assert reply.headers["x-hasten-upstream"] == "local"
    assert reply.headers["x-hasten-hybrid"] == "cloud; reason=cloud-first"
    assert reply.parse().choices[0].message.content


def test_cloud_first_falls_back_when_first_token_is_late(local_server: EngineProcess) -> None:
    with ServerThread(build_sim(SimConfig(ttft_base_ms=20_000))) as stalled:
        hybrid = HybridConfig(
            policy="cloud-first", cloud_model="gpt-cloud", cloud_first_token_timeout_s=0.5
        )
        config = _edge_config(stalled.url + "/v1", local_server.url, hybrid)
        with running_gateway(config) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
            stream = client.chat.completions.create(
                model="auto", messages=_ask("Say hello."), temperature=0, max_tokens=8, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text
            deadline = time.monotonic() + 5
            while sim_stats(stalled.url)["num_cancelled"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sim_stats(stalled.url)["num_cancelled"] == 1


def test_local_first_fails_over_to_the_cloud_while_the_engine_is_down(
    cloud: ServerThread,
) -> None:
    hybrid = HybridConfig(policy="local-first", cloud_model="gpt-cloud")
    engine_down = f"http://127.0.0.1:{free_port()}"  # a crashed child's port refuses
    with running_gateway(_edge_config(cloud.url + "/v1", engine_down, hybrid)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.with_raw_response.create(
            model="auto", messages=_ask("Hi there!"), temperature=0, max_tokens=8
        )
    assert reply.status_code == 200
    assert reply.headers["x-hasten-hybrid"] == "local; reason=easy"
    assert reply.headers["x-hasten-upstream"] == "cloud"
    assert "local=" in reply.headers["x-hasten-failover"]


WEATHER_TOOL: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_tools_to_a_model_without_tools_are_a_clear_400(
    client: openai.OpenAI, stream: bool
) -> None:
    # SmolLM2's chat template has no tools: llama-server would answer in plain text.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="local",
            messages=_ask("What is the weather in Paris?"),
            tools=WEATHER_TOOL,
            tool_choice="required",
            max_tokens=16,
            stream=stream,
            extra_headers=NO_CACHE,
        )
    assert caught.value.code == "tools_unsupported"
    assert "cannot call tools" in caught.value.message
    # Tools switched off: an ordinary answer.
    plain = client.chat.completions.create(
        model="local",
        messages=_ask("Hi"),
        tools=WEATHER_TOOL,
        tool_choice="none",
        max_tokens=4,
        extra_headers=NO_CACHE,
    )
    assert plain.choices[0].message.content


def test_json_schema_output_is_valid_json_of_the_schema(client: openai.OpenAI) -> None:
    for index in range(3):
        reply = client.chat.completions.create(
            model="local",
            messages=_ask(f"Describe person number {index}."),
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "strict": True, "schema": PERSON_SCHEMA},
            },
            temperature=0.8,
            seed=index,
            max_tokens=64,
            extra_headers=NO_CACHE,
        )
        content = reply.choices[0].message.content
        assert content is not None and reply.choices[0].finish_reason == "stop"
        person = json.loads(content)
        assert set(person) == {"name", "age"}
        assert isinstance(person["name"], str) and type(person["age"]) is int


def test_messages_pass_through_to_the_engine_natively(gateway: ServerThread) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0)
    reply = client.messages.with_raw_response.create(
        model="local",
        max_tokens=8,
        system="Answer briefly.",
        messages=[{"role": "user", "content": "Name a colour."}],
        extra_headers=NO_CACHE,
    )
    assert reply.headers["x-hasten-upstream"] == "local"
    message = reply.parse()
    assert message.type == "message" and message.stop_reason in ("end_turn", "max_tokens")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens <= 8

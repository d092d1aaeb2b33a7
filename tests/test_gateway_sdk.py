"""The official openai SDK, sync and async, stream and not, through hasten to the simulator."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hasten.simulator import SimConfig, build_app
from tests.support.gateway import BodyRecorder, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as server:
        yield server


def _messages(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def test_sync_non_stream_matches_direct_call(sim: ServerThread, gateway: ServerThread) -> None:
    direct = openai.OpenAI(base_url=sim.url + "/v1", api_key="k")
    via = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    kwargs = {"model": "sim-model", "messages": _messages("sync question"), "temperature": 0}
    expected = direct.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    raw = via.chat.completions.with_raw_response.create(**kwargs)  # type: ignore[call-overload]
    got = raw.parse()
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.choices[0].finish_reason == "stop"
    assert raw.headers["x-hasten-cache"] == "miss"
    assert "hasten;dur=" in raw.headers["server-timing"]
    assert "upstream;dur=" in raw.headers["server-timing"]


def test_sync_stream_then_cached_stream(gateway: ServerThread, sim: ServerThread) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    kwargs = {
        "model": "sim-model",
        "messages": _messages("stream me"),
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    before = sim_stats(sim.url)["num_requests"]
    first = list(client.chat.completions.create(**kwargs))  # type: ignore[call-overload]
    second = list(client.chat.completions.create(**kwargs))  # type: ignore[call-overload]
    text = "".join(c.choices[0].delta.content or "" for c in first if c.choices)
    assert text
    assert "".join(c.choices[0].delta.content or "" for c in second if c.choices) == text
    assert first[-1].usage is not None and second[-1].usage is not None
    assert sim_stats(sim.url)["num_requests"] == before + 1


async def test_async_stream_and_non_stream(gateway: ServerThread) -> None:
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k")
    stream = await client.chat.completions.create(
        model="sim-model", messages=_messages("async"), temperature=0, stream=True
    )
    parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    reply = await client.chat.completions.create(
        model="sim-model", messages=_messages("async"), temperature=0
    )
    assert reply.choices[0].message.content == "".join(parts)
    await client.close()


async def test_async_completions_endpoint(gateway: ServerThread) -> None:
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k")
    reply = await client.completions.create(
        model="sim-model", prompt="Once upon", max_tokens=5, temperature=0
    )
    assert reply.choices[0].text
    stream = await client.completions.create(
        model="sim-model", prompt="Once upon", max_tokens=5, temperature=0, stream=True
    )
    assert "".join([c.choices[0].text async for c in stream if c.choices]) == reply.choices[0].text
    await client.close()


def test_embeddings_and_models(gateway: ServerThread) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    result = client.embeddings.create(model="sim-model", input=["a", "b"])
    assert len(result.data) == 2 and len(result.data[0].embedding) > 0
    models = [m.id for m in client.models.list()]
    assert "sim-model" in models


def test_unknown_fields_pass_through_untouched(gateway: ServerThread) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    reply = client.chat.completions.create(
        model="sim-model",
        messages=_messages("tools"),
        temperature=0,
        seed=7,
        n=1,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        extra_body={"hasten_unknown_field": {"x": 1}},
    )
    assert reply.choices[0].message is not None


def test_alias_is_rewritten_for_the_upstream() -> None:
    recorder = BodyRecorder(build_app(SimConfig()))
    with ServerThread(recorder) as upstream:
        config = make_config(
            {"sim": upstream.url + "/v1"}, models=("sim-model",), aliases={"fast": "sim-model"}
        )
        with running_gateway(config) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
            client.chat.completions.create(model="fast", messages=_messages("alias"))
            client.chat.completions.create(model="sim-model", messages=_messages("name"))
    # The upstream only knows the real name; a client's alias never reaches it.
    assert [orjson.loads(body)["model"] for body in recorder.bodies] == ["sim-model"] * 2


def test_alias_and_unknown_model(sim: ServerThread) -> None:
    config = make_config(
        {"sim": sim.url + "/v1"}, models=("sim-model",), aliases={"fast": "sim-model"}
    )
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.create(model="fast", messages=_messages("alias"))
        assert reply.choices[0].message.content
        assert {"sim-model", "fast"} <= {m.id for m in client.models.list()}
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(model="nope", messages=_messages("x"))
        assert info.value.body["param"] == "model"  # type: ignore[index]

"""Streamed usage through the cache: each client gets the usage chunk only if it asked.

A stored stream asks the upstream for ``stream_options.include_usage`` whatever the client
sent, so a later client that asks can be served usage from the cache; a client that did not
ask must not get the usage-only chunk (empty ``choices``), live, coalesced or replayed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionChunk

from hasten.config import CacheConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import (
    BodyRecorder,
    chat_body,
    make_config,
    running_gateway,
    sim_stats,
)
from tests.support.servers import ServerThread

ASK = {"stream_options": {"include_usage": True}}


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


@pytest.fixture()
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as server:
        yield server


def _calls(sim: ServerThread) -> int:
    return int(sim_stats(sim.url)["num_requests"])


def _stream(
    client: openai.OpenAI, text: str, **extra: Any
) -> tuple[str, list[ChatCompletionChunk]]:
    """(x-hasten-cache, chunks) of one streamed chat request."""
    raw = client.chat.completions.with_raw_response.create(**chat_body(text, stream=True, **extra))
    return raw.headers["x-hasten-cache"], list(raw.parse())


def _text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _assert_no_usage_chunk(chunks: list[ChatCompletionChunk]) -> None:
    assert chunks
    # What client code doing chunk.choices[0] relies on.
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def _usage_of(chunks: list[ChatCompletionChunk]) -> dict[str, Any]:
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.choices for c in chunks[:-1])
    usage = last.usage.model_dump()
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


def _direct_usage(sim: ServerThread, text: str) -> dict[str, Any]:
    """What the upstream itself reports for this request with usage asked for."""
    direct = openai.OpenAI(base_url=sim.url + "/v1", api_key="k")
    chunks = list(direct.chat.completions.create(**chat_body(text, stream=True, **ASK)))
    return _usage_of(chunks)


def test_usage_asked_on_a_hit_after_a_miss_without(
    sim: ServerThread, gateway: ServerThread
) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    expected_usage = _direct_usage(sim, "usage later")
    before = _calls(sim)
    label, first = _stream(client, "usage later")
    assert label == "miss"
    _assert_no_usage_chunk(first)
    label, second = _stream(client, "usage later", **ASK)
    assert label == "hit"
    assert _usage_of(second) == expected_usage
    assert expected_usage["completion_tokens"] == len(_text(second).split())
    label, third = _stream(client, "usage later")
    assert label == "hit"
    _assert_no_usage_chunk(third)
    assert _text(first) == _text(second) == _text(third)
    assert _calls(sim) == before + 1


def test_no_usage_on_a_hit_after_a_miss_that_asked(
    sim: ServerThread, gateway: ServerThread
) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    expected_usage = _direct_usage(sim, "usage first")
    before = _calls(sim)
    label, first = _stream(client, "usage first", **ASK)
    assert label == "miss"
    assert _usage_of(first) == expected_usage
    label, second = _stream(client, "usage first")
    assert label == "hit"
    _assert_no_usage_chunk(second)
    label, third = _stream(client, "usage first", **ASK)
    assert label == "hit"
    assert _usage_of(third) == expected_usage
    assert _text(first) == _text(second) == _text(third)
    assert _calls(sim) == before + 1


async def _astream(client: openai.AsyncOpenAI, text: str, delay_s: float, **extra: Any) -> Any:
    await asyncio.sleep(delay_s)
    raw = await client.chat.completions.with_raw_response.create(
        **chat_body(text, stream=True, **extra)
    )
    # The first asks upstream; the two later ones share its call.
    assert raw.headers["x-hasten-cache"] == ("miss" if delay_s == 0.0 else "coalesced")
    return [chunk async for chunk in raw.parse()]


@pytest.mark.parametrize("first_asks", [True, False])
async def test_coalesced_streams_each_get_what_they_asked(first_asks: bool) -> None:
    # 300 ms to the first token, 16 tokens 60 ms apart: the second client joins before
    # any byte came, the third mid-stream (it is sent what was already received first),
    # with most of a second to spare on a loaded machine.
    with ServerThread(build_app(SimConfig(ttft_base_ms=300, decode_ms_per_token=60))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k")
            text = f"coalesced usage {first_asks}"
            first, second, third = await asyncio.gather(
                _astream(client, text, 0.0, **(ASK if first_asks else {})),
                _astream(client, text, 0.1, **({} if first_asks else ASK)),
                _astream(client, text, 0.45),
            )
            await client.close()
            assert _calls(sim) == 1
            stats = httpx.get(f"{gateway.url}/stats").json()
            assert stats["requests"]["coalesced"] == 2
    asker, non_asker = (first, second) if first_asks else (second, first)
    usage = _usage_of(asker)
    assert usage["completion_tokens"] == 16
    _assert_no_usage_chunk(non_asker)
    _assert_no_usage_chunk(third)
    assert _text(asker) == _text(non_asker) == _text(third)


def _post(
    gateway: ServerThread, body: dict[str, Any], **headers: str
) -> tuple[httpx.Response, bytes]:
    """(response, the exact bytes sent)."""
    raw = orjson.dumps(body)
    headers["content-type"] = "application/json"
    url = f"{gateway.url}/v1/chat/completions"
    response = httpx.post(url, content=raw, headers=headers, timeout=30)
    assert response.status_code == 200
    return response, raw


def test_bypassed_streams_are_forwarded_as_sent() -> None:
    upstream = BodyRecorder(build_app(SimConfig()))
    with ServerThread(upstream) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            no_store = {**chat_body("no store", stream=True), "stream_options": {}}
            response, raw = _post(gateway, no_store, **{"cache-control": "no-store"})
            assert upstream.bodies[-1] == raw  # byte for byte
            assert response.headers["x-hasten-cache"] == "miss"  # looked up, never stored
            assert b'"usage"' not in response.content
            hot = chat_body("hot", stream=True, temperature=0.7)
            response, raw = _post(gateway, hot)
            assert upstream.bodies[-1] == raw
            assert response.headers["x-hasten-cache"] == "bypass"
            fresh = chat_body("no lookup, no store", stream=True)
            response, raw = _post(gateway, fresh, **{"cache-control": "no-cache, no-store"})
            assert upstream.bodies[-1] == raw
            asked = chat_body("asked, no store", stream=True, **ASK)
            response, raw = _post(gateway, asked, **{"cache-control": "no-store"})
            assert upstream.bodies[-1] == raw
            assert b'"choices":[],"usage":{' in response.content

            # A stored stream does ask for usage upstream, and keeps the rest as sent.
            stored = {**chat_body("stored", stream=True), "stream_options": {"x": 1}}
            response, _ = _post(gateway, stored)
            sent = orjson.loads(upstream.bodies[-1])
            assert sent == {**stored, "stream_options": {"x": 1, "include_usage": True}}
            assert b'"usage":{' not in response.content
            assert response.content.endswith(b"data: [DONE]\n\n")
        cache_off = CacheConfig(backend="memory", is_enabled=False)
        with running_gateway(make_config({"sim": sim.url + "/v1"}, cache=cache_off)) as gateway:
            response, raw = _post(gateway, chat_body("cache off", stream=True))
            assert upstream.bodies[-1] == raw
            assert response.headers["x-hasten-cache"] == "bypass"


def test_upstream_without_stream_options_gets_none() -> None:
    """``stream_options = false`` on an upstream: stored streams are sent as the client sent
    them, so such a server never sees a field it would reject."""
    upstream = BodyRecorder(build_app(SimConfig()))
    with ServerThread(upstream) as sim:
        config = make_config({"sim": sim.url + "/v1"})
        plain = replace(config.upstreams["sim"], has_stream_options=False)
        config = replace(config, upstreams={"sim": plain})
        with running_gateway(config) as gateway:
            stored = chat_body("stored, plain upstream", stream=True)
            response, raw = _post(gateway, stored)
            assert upstream.bodies[-1] == raw  # byte for byte: no stream_options added
            assert response.headers["x-hasten-cache"] == "miss"
            assert b'"usage":{' not in response.content
            replay, _ = _post(gateway, stored)
            assert replay.headers["x-hasten-cache"] == "hit"
            assert replay.content.endswith(b"data: [DONE]\n\n")


async def test_no_store_stream_does_not_join_a_stored_one() -> None:
    """A no-store stream is sent as is, so it cannot share a call that asked for usage."""
    with ServerThread(build_app(SimConfig(ttft_base_ms=300))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k")

            async def no_store() -> Any:
                await asyncio.sleep(0.1)
                stream = await client.chat.completions.create(
                    **chat_body("apart", stream=True),
                    extra_headers={"cache-control": "no-store"},
                )
                return [chunk async for chunk in stream]

            stored, unstored = await asyncio.gather(_astream(client, "apart", 0.0), no_store())
            await client.close()
            assert _calls(sim) == 2
    _assert_no_usage_chunk(stored)
    _assert_no_usage_chunk(unstored)

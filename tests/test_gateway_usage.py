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
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from hasten.cache import MemoryLRU, TieredCache
from hasten.config import CacheConfig
from hasten.proxy.flight import Flight
from hasten.proxy.recorder import Recorder
from hasten.proxy.sse import DONE, SSEDecoder, UsageStripper
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
    assert raw.headers["x-hasten-cache"] == "miss"
    return [chunk async for chunk in raw.parse()]


@pytest.mark.parametrize("first_asks", [True, False])
async def test_coalesced_streams_each_get_what_they_asked(first_asks: bool) -> None:
    # 300 ms to the first token, 16 tokens 30 ms apart: the second client joins before
    # any byte came, the third mid-stream (it is sent what was already received first).
    with ServerThread(build_app(SimConfig(ttft_base_ms=300, decode_ms_per_token=30))) as sim:
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


# --- the stripper, under every way the network may split the stream -------------------

_HEAD = b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
_EVENTS = (
    _HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}],'
    b'"usage":null}',
    # A token that reads "usage" must not be mistaken for the usage chunk.
    _HEAD + b'"choices":[{"index":0,"delta":{"content":"usage"},"finish_reason":null}],'
    b'"usage":null}',
    _HEAD + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}',
    _HEAD + b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}',
    DONE,
)
_USAGE_INDEX = 3


def _stream_bytes(eol: bytes, multiline_usage: bool) -> tuple[bytes, list[bytes]]:
    """The raw stream with ``eol`` line ends, and each event's raw bytes."""
    raws = []
    for i, payload in enumerate(_EVENTS):
        if i == _USAGE_INDEX and multiline_usage:
            # Data split over lines (joined by \n it is still the same JSON) plus a comment.
            head, _, tail = payload.partition(b'"choices"')
            raws.append(b"data: " + head + eol + b": ping" + eol + b'data:"choices"' + tail)
        else:
            raws.append(b"data: " + payload)
        raws[-1] += eol + eol
    return b"".join(raws), raws


def _strip(chunks: list[bytes], eol: bytes, raws: list[bytes]) -> bytes:
    """Runs the recorder (which marks) and the stripper (which drops) like a flight does,
    checking after every chunk that each event the decoder has seen whole was let through."""
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", "chat", True, ttl_s=60)
    decoder = SSEDecoder()
    stripper = UsageStripper()
    kept = [raw for i, raw in enumerate(raws) if i != _USAGE_INDEX]
    expected = b"".join(kept)
    out = b""
    num_seen = 0
    for chunk in chunks:
        out += stripper.feed(chunk, recorder.feed(chunk))
        num_seen += len(decoder.feed(chunk))
        assert expected.startswith(out)
        released = sum(len(raw) for i, raw in enumerate(raws[:num_seen]) if i != _USAGE_INDEX)
        # A CR ends a line, so "...\r\n\r" is a whole event still waiting for its last LF.
        assert len(out) >= released - (eol == b"\r\n")
    out += stripper.finish()
    answer = recorder.answer()
    assert answer is not None and answer.chunks is not None
    assert len(answer.chunks) == len(_EVENTS) - 1  # the cache keeps the usage chunk
    return out


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("multiline_usage", [False, True])
def test_stripper_at_every_split_point(eol: bytes, multiline_usage: bool) -> None:
    stream, raws = _stream_bytes(eol, multiline_usage)
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    assert _strip([stream], eol, raws) == expected
    for cut in range(len(stream) + 1):
        assert _strip([stream[:cut], stream[cut:]], eol, raws) == expected
    usage_start = sum(len(raw) for raw in raws[:_USAGE_INDEX])
    usage_end = usage_start + len(raws[_USAGE_INDEX])
    # Every pair of cuts from just before the usage event to the end of the stream.
    for first in range(usage_start - 8, len(stream) + 1):
        for second in range(max(first, usage_end - 8), len(stream) + 1):
            chunks = [stream[:first], stream[first:second], stream[second:]]
            assert _strip(chunks, eol, raws) == expected
    one_byte_each = [stream[i : i + 1] for i in range(len(stream))]
    assert _strip(one_byte_each, eol, raws) == expected


@settings(deadline=None, max_examples=300)
@given(
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    multiline_usage=st.booleans(),
    cuts=st.lists(st.integers(0, 1200), max_size=12),
)
def test_stripper_under_random_splits(eol: bytes, multiline_usage: bool, cuts: list[int]) -> None:
    stream, raws = _stream_bytes(eol, multiline_usage)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    assert _strip(chunks, eol, raws) == expected


_word = st.text(alphabet="abc usage:{}[],", max_size=12)


def _data_event(payload: bytes, eol: bytes, is_multiline: bool) -> bytes:
    if not is_multiline:
        return b"data: " + payload + eol + eol
    # A data line after each comma: joined by LF it is the same JSON.
    lines = payload.replace(b",", b",\0").split(b"\0")
    return eol.join(b"data: " + line for line in lines) + eol + eol


@st.composite
def _mixed_events(draw: st.DrawFn) -> list[tuple[bytes, bool]]:
    """(raw event, is usage-only): text chunks, comments and blank lines, then maybe the
    usage chunk, then [DONE]; each with its own line ends."""
    events: list[tuple[bytes, bool]] = []
    for _ in range(draw(st.integers(0, 6))):
        eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
        extra = eol * draw(st.integers(0, 2))  # blank lines between events change nothing
        if draw(st.booleans()):
            events.append((b": ping" + eol + eol + extra, False))
            continue
        payload = b'{"choices":[{"delta":{"content":"%s"}}],"usage":null}' % draw(_word).encode()
        events.append((_data_event(payload, eol, draw(st.booleans())) + extra, False))
    if draw(st.booleans()):
        eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
        payload = b'{"choices":[],"usage":{"total_tokens":%d}}' % draw(st.integers(1, 99))
        events.append((_data_event(payload, eol, draw(st.booleans())), True))
    events.append((b"data: [DONE]\n\n", False))
    return events


def _decoded(stream: bytes) -> list[bytes]:
    decoder = SSEDecoder()
    payloads = decoder.feed(stream)
    assert not decoder.has_pending
    return payloads


@settings(deadline=None, max_examples=500)
@given(events=_mixed_events(), cuts=st.lists(st.integers(0, 600), max_size=10))
def test_stripper_with_any_events_and_line_ends(
    events: list[tuple[bytes, bool]], cuts: list[int]
) -> None:
    stream = b"".join(raw for raw, _ in events)
    kept = b"".join(raw for raw, is_usage in events if not is_usage)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", "chat", True, ttl_s=60)
    stripper = UsageStripper()
    out = b"".join([stripper.feed(chunk, recorder.feed(chunk)) for chunk in chunks])
    out += stripper.finish()
    assert _decoded(out) == _decoded(kept)
    # Byte for byte but for where a blank line between events ends up.
    assert out.translate(None, b"\r\n") == kept.translate(None, b"\r\n")


def test_stripper_passes_a_stream_without_usage_untouched() -> None:
    stripper = UsageStripper()
    stream, _ = _stream_bytes(b"\n", False)
    assert stripper.feed(stream, 0) == stream  # not flagged: never looked into
    assert stripper.feed(b"data: {", 0) == b""  # half an event waits...
    assert stripper.finish() == b"data: {"  # ...and goes out as it came if the stream ends


async def test_flight_readers_with_and_without_usage() -> None:
    stream, raws = _stream_bytes(b"\n", False)
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    cut = stream.index(b'"choices":[]')  # the usage event arrives in two pieces
    flight = Flight()
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", "chat", True, ttl_s=60)

    async def read(strip: bool) -> bytes:
        chunks = flight.iter_chunks_without_usage() if strip else flight.iter_chunks()
        return b"".join([chunk async for chunk in chunks])

    live = asyncio.gather(read(True), read(False))
    for chunk in (stream[:cut], stream[cut : cut + 5], stream[cut + 5 :]):
        await asyncio.sleep(0)
        flight.push(chunk, recorder.feed(chunk))
    flight.finish()
    assert list(await live) == [expected, stream]
    assert flight.usage_at == {2: 1}
    assert await read(True) == expected  # a late reader replays the recording the same way

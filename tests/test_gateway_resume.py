"""Streams that survive a dying upstream, end to end: a loopback simulator that cuts every
stream halfway (the role chunk plus half the tokens), a healthy second deployment, and the
gateway with ``resume_streams`` on, checked with raw SSE bytes and with the openai SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import orjson
import pytest

from hasten.config import GatewayConfig
from hasten.proxy.assemble import assemble
from hasten.simulator import SimConfig, build_app
from hasten.wire.sse import SSEDecoder
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

NUM_TOKENS = 24  # the cut comes after the role chunk and 12 of them


@pytest.fixture(scope="module")
def cutting() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(disconnect_rate=1.0, output_tokens=NUM_TOKENS))) as sim:
        yield sim


@pytest.fixture(scope="module")
def healthy() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(output_tokens=NUM_TOKENS))) as sim:
        yield sim


def _config(
    first: ServerThread, second: ServerThread, *, is_resuming: bool = True, prefill: str = "none"
) -> GatewayConfig:
    config = make_config(
        {"first": first.url + "/v1", "second": second.url + "/v1"}, fallbacks=("second",)
    )
    upstreams = {**config.upstreams}
    upstreams["second"] = replace(upstreams["second"], prefill=prefill)
    models = {n: replace(r, is_resuming_streams=is_resuming) for n, r in config.models.items()}
    return replace(config, upstreams=upstreams, models=models)


def _stream(url: str, body: dict[str, Any]) -> bytes:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        return response.read()


def _text(stream: bytes) -> str:
    parts = []
    for payload in SSEDecoder().feed(stream):
        if payload == b"[DONE]":
            continue
        for choice in orjson.loads(payload).get("choices") or ():
            parts.append(choice.get("delta", {}).get("content") or "")
    return "".join(parts)


def _trailer(stream: bytes) -> dict[str, Any]:
    start = stream.index(b"\n: hasten-resume ") + len(b"\n: hasten-resume ")
    note: dict[str, Any] = orjson.loads(stream[start : stream.index(b"\n", start)])
    return note


def _uncut(healthy: ServerThread, body: dict[str, Any]) -> str:
    return _text(_stream(healthy.url, {**body, "stream": True}))


def test_a_deterministic_stream_cut_mid_answer_is_the_uncut_answer_byte_for_byte(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    body = chat_body("resume me, byte for byte", stream=True)
    uncut = _uncut(healthy, body)
    cuts_before = sim_stats(cutting.url)["num_disconnects"]
    with running_gateway(_config(cutting, healthy)) as gateway:
        stream = _stream(gateway.url, body)
        assert sim_stats(cutting.url)["num_disconnects"] == cuts_before + 1  # it was cut
        assert _text(stream).encode() == uncut.encode()
        assert stream.endswith(b"data: [DONE]\n\n")
        assert b'"role"' not in stream.split(b"\n\n", 1)[1]  # one role chunk, not two
        assert _trailer(stream) == {
            "outcome": "regenerated",
            "deployment": "second",
            "after_bytes": _trailer(stream)["after_bytes"],
        }
        # Complete and consistent: cached, and served whole from the cache.
        again = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
        assert again.headers["x-hasten-cache"] == "hit"
        assert _text(again.content) == uncut
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=30).text
        assert 'hasten_stream_resumes_total{model="*",outcome="regenerated"} 1.0' in metrics


def test_the_openai_sdk_reads_a_resumed_stream_and_a_resumed_body(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    stream_body = chat_body("resume me through the sdk")
    uncut = _uncut(healthy, stream_body)
    with running_gateway(_config(cutting, healthy)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
        messages: Any = stream_body["messages"]
        chunks = list(
            client.chat.completions.create(
                model="sim-model", messages=messages, temperature=0, stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == uncut
        # A non-stream client: its body is assembled from the resumed stream.
        other: Any = [{"role": "user", "content": "resume my whole body"}]
        expected = _uncut(healthy, chat_body("resume my whole body"))
        raw = client.chat.completions.with_raw_response.create(
            model="sim-model", messages=other, temperature=0
        )
        assert raw.parse().choices[0].message.content == expected
        assert raw.headers["x-hasten-resume"] == "regenerated"


def test_a_regeneration_that_differs_falls_back_to_prefill_and_is_not_cached(
    cutting: ServerThread,
) -> None:
    # Another length, another text: the simulator's words depend on the answer's length.
    with ServerThread(build_app(SimConfig(output_tokens=NUM_TOKENS + 80))) as other:
        config = _config(cutting, other, prefill="continue_final_message")
        body = chat_body("resume me, differently", stream=True)
        with running_gateway(config) as gateway:
            stream = _stream(gateway.url, body)
            assert _trailer(stream)["outcome"] == "prefilled"
            assert stream.endswith(b"data: [DONE]\n\n")
            assert sim_stats(other.url)["num_requests"] == 2  # the regeneration, the prefill
            again = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
            assert again.headers["x-hasten-cache"] == "miss"


@pytest.mark.parametrize("mechanism", ["continue_final_message", "assistant_prefix"])
def test_a_non_deterministic_stream_is_continued_by_prefill(
    cutting: ServerThread, healthy: ServerThread, mechanism: str
) -> None:
    body = chat_body(f"prefill me via {mechanism}", stream=True, temperature=0.7)
    uncut = _uncut(healthy, body)  # the simulator's words do not depend on the temperature
    with running_gateway(_config(cutting, healthy, prefill=mechanism)) as gateway:
        stream = _stream(gateway.url, body)
    assert _text(stream) == uncut
    assert _trailer(stream)["outcome"] == "prefilled"


def test_without_prefill_a_non_deterministic_stream_ends_with_the_clean_error_event(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    body = chat_body("cannot be resumed", stream=True, temperature=0.7)
    before = sim_stats(healthy.url)["num_requests"]
    with running_gateway(_config(cutting, healthy)) as gateway:
        stream = _stream(gateway.url, body)
    assert sim_stats(healthy.url)["num_requests"] == before  # nothing to continue it with
    assert _trailer(stream)["outcome"] == "failed"
    last = SSEDecoder().feed(stream)[-1]
    assert orjson.loads(last)["error"]["type"] == "upstream_error"
    assert b"[DONE]" not in stream


def test_resume_is_off_by_default(cutting: ServerThread, healthy: ServerThread) -> None:
    body = chat_body("not resumed by default", stream=True)
    before = sim_stats(healthy.url)["num_requests"]
    with running_gateway(_config(cutting, healthy, is_resuming=False)) as gateway:
        stream = _stream(gateway.url, body)
        whole = httpx.post(
            f"{gateway.url}/v1/chat/completions", json={**body, "stream": False}, timeout=30
        )
    assert sim_stats(healthy.url)["num_requests"] == before
    assert b"hasten-resume" not in stream and b"[DONE]" not in stream
    assert "error" in orjson.loads(SSEDecoder().feed(stream)[-1])
    assert whole.status_code == 502  # a non-stream client's cut, as before


def test_a_non_stream_bypassed_request_is_continued_by_prefill(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    # Not deterministic, so not cacheable: asked as a stream outside any flight, assembled.
    body = chat_body("assemble my prefilled body", temperature=0.7)
    uncut = _uncut(healthy, body)
    with running_gateway(_config(cutting, healthy, prefill="assistant_prefix")) as gateway:
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.headers["x-hasten-cache"] == "bypass"
    assert response.headers["x-hasten-resume"] == "prefilled"
    assert response.json()["choices"][0]["message"]["content"] == uncut


def test_a_cut_completions_stream_is_regenerated(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    body = {"model": "sim-model", "prompt": "once upon a cut", "temperature": 0, "stream": True}

    def text(url: str) -> bytes:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
            return response.read()

    uncut = text(healthy.url)
    with running_gateway(_config(cutting, healthy)) as gateway:
        stream = text(gateway.url)
    assert _trailer(stream)["outcome"] == "regenerated"

    def joined(data: bytes) -> str:
        payloads = [p for p in SSEDecoder().feed(data) if p != b"[DONE]"]
        return "".join(c["text"] for p in payloads for c in orjson.loads(p)["choices"])

    assert joined(stream) == joined(uncut) and joined(uncut)


def test_coalesced_waiters_all_get_the_resumed_answer(healthy: ServerThread) -> None:
    slow = SimConfig(disconnect_rate=1.0, output_tokens=NUM_TOKENS, decode_ms_per_token=20)
    with ServerThread(build_app(slow)) as cutting_slowly:
        body = chat_body("resume us all", stream=True)
        uncut = _uncut(healthy, body)
        before = sim_stats(healthy.url)["num_requests"]
        with running_gateway(_config(cutting_slowly, healthy)) as gateway:

            async def both() -> list[bytes]:
                async with httpx.AsyncClient(timeout=30) as client:

                    async def one() -> bytes:
                        url = f"{gateway.url}/v1/chat/completions"
                        async with client.stream("POST", url, json=body) as response:
                            return await response.aread()

                    return list(await asyncio.gather(one(), one()))

            streams = asyncio.run(both())
        assert sim_stats(cutting_slowly.url)["num_requests"] == 1  # one flight
    assert [_text(s) for s in streams] == [uncut, uncut]
    assert sim_stats(healthy.url)["num_requests"] == before + 1  # one regeneration


def test_a_request_that_must_not_run_twice_is_not_resumed(
    cutting: ServerThread, healthy: ServerThread
) -> None:
    body = chat_body("run me once", stream=True)
    before = sim_stats(healthy.url)["num_requests"]
    with running_gateway(_config(cutting, healthy)) as gateway:
        url = f"{gateway.url}/v1/chat/completions"
        headers = {"x-hasten-idempotent": "false"}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
            stream = response.read()
    assert sim_stats(healthy.url)["num_requests"] == before
    assert b"hasten-resume" not in stream and b"[DONE]" not in stream


@pytest.mark.parametrize(
    "extra",
    [
        {"n": 2},
        {"tools": [{"type": "function", "function": {"name": "lookup"}}]},
    ],
    ids=["two-choices", "tool-call"],
)
def test_several_choices_and_tool_calls_resume_to_the_uncut_answer(
    cutting: ServerThread, healthy: ServerThread, extra: dict[str, Any]
) -> None:
    body = chat_body(f"resume {sorted(extra)}", stream=True, **extra)

    def answer(stream: bytes) -> Any:
        return orjson.loads(assemble(stream, "chat"))["choices"]

    uncut = answer(_stream(healthy.url, body))
    with running_gateway(_config(cutting, healthy)) as gateway:
        stream = _stream(gateway.url, body)
    assert _trailer(stream)["outcome"] == "regenerated"
    assert answer(stream) == uncut

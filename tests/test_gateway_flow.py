"""Coalescing, disconnects, retries, Retry-After and fallback, against real loopback servers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import httpx
import openai
import orjson
import pytest

from hasten.app import HastenApp
from hasten.config import CacheConfig
from hasten.server.connection import protocol_for
from hasten.simulator import SimConfig, build_app
from hasten.upstream.lean import LeanTransport
from hasten.upstream.transport import AiohttpTransport
from tests.support.gateway import (
    ScriptedUpstream,
    chat_body,
    completion,
    make_config,
    running_gateway,
    sim_stats,
)
from tests.support.servers import ServerThread, free_port


async def test_identical_concurrent_requests_make_one_upstream_call() -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=300, decode_ms_per_token=5))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="k")
            body = chat_body("coalesce me")
            replies = await asyncio.gather(
                *(client.chat.completions.create(**body) for _ in range(8))
            )
            texts = {r.choices[0].message.content for r in replies}
            assert len(texts) == 1 and texts.pop()
            assert sim_stats(sim.url)["num_requests"] == 1

            async def stream_text() -> str:
                stream = await client.chat.completions.create(
                    **chat_body("coalesce stream", stream=True)
                )
                return "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )

            streamed = await asyncio.gather(*(stream_text() for _ in range(6)))
            assert len(set(streamed)) == 1 and streamed[0]
            assert sim_stats(sim.url)["num_requests"] == 2
            await client.close()


async def test_late_joiner_gets_the_whole_stream() -> None:
    with ServerThread(build_app(SimConfig(decode_ms_per_token=40))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            body = chat_body("late joiner", stream=True, max_tokens=20)
            async with httpx.AsyncClient(timeout=30) as http:
                first = asyncio.create_task(http.post(url, json=body))
                await asyncio.sleep(0.3)  # a few chunks have gone out by now
                second = await http.post(url, json=body)
                first_response = await first
            assert first_response.text == second.text
            assert second.text.endswith("data: [DONE]\n\n")
            assert sim_stats(sim.url)["num_requests"] == 1
            # The follower says what it was, as the metrics do (issue 41).
            assert first_response.headers["x-hasten-cache"] == "miss"
            assert second.headers["x-hasten-cache"] == "coalesced"


async def test_leaving_waiter_does_not_cancel_others_last_one_does() -> None:
    with ServerThread(build_app(SimConfig(decode_ms_per_token=30))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            body = chat_body("shared", stream=True, max_tokens=30)
            async with httpx.AsyncClient(timeout=30) as http:
                stayer = asyncio.create_task(http.post(url, json=body))
                await asyncio.sleep(0.1)
                async with http.stream("POST", url, json=body) as leaver:
                    async for _ in leaver.aiter_bytes():
                        break
                full = await stayer
            assert full.text.endswith("data: [DONE]\n\n")
            assert sim_stats(sim.url)["num_cancelled"] == 0


def test_client_disconnect_cancels_upstream() -> None:
    with ServerThread(build_app(SimConfig(decode_ms_per_token=50))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            body = {**chat_body("bye", stream=True, max_tokens=100), "temperature": 0.9}
            with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as r:
                assert r.headers["x-hasten-cache"] == "bypass"
                next(r.iter_bytes())
            deadline = time.monotonic() + 5
            while sim_stats(sim.url)["num_cancelled"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = sim_stats(sim.url)
            assert stats["num_cancelled"] == 1
            assert stats["num_completion_tokens"] < 100


def test_retries_5xx_then_succeeds() -> None:
    upstream = ScriptedUpstream(
        [
            (503, {}, {"error": {"message": "busy"}}),
            (500, {}, {"error": {"message": "oops"}}),
            (200, {}, completion("third time")),
        ]
    )
    with ServerThread(upstream) as server:
        with running_gateway(make_config({"u": server.url + "/v1"})) as gateway:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "third time"
    assert len(upstream.calls) == 3


def test_retry_after_is_honoured() -> None:
    upstream = ScriptedUpstream(
        [
            (429, {"retry-after": "1"}, {"error": {"message": "slow"}}),
            (200, {}, completion("after waiting")),
        ]
    )
    with ServerThread(upstream) as server:
        with running_gateway(make_config({"u": server.url + "/v1"})) as gateway:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
    assert response.status_code == 200
    assert len(upstream.calls) == 2
    assert upstream.calls[1] - upstream.calls[0] >= 0.95  # a lower bound: sleeps never end early


def test_fallback_after_retries() -> None:
    broken = ScriptedUpstream([(500, {}, {"error": {"message": "down"}})])
    backup = ScriptedUpstream([(200, {}, completion("from backup"))])
    with ServerThread(broken) as one, ServerThread(backup) as two:
        config = make_config({"one": one.url + "/v1", "two": two.url + "/v1"}, fallbacks=["two"])
        with running_gateway(config) as gateway:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
    assert response.json()["choices"][0]["message"]["content"] == "from backup"
    assert len(broken.calls) == 3  # the first try plus max_retries=2
    assert len(backup.calls) == 1


def test_fallback_when_primary_unreachable() -> None:
    backup = ScriptedUpstream([(200, {}, completion("backup"))])
    with ServerThread(backup) as two:
        config = make_config(
            {"one": f"http://127.0.0.1:{free_port()}/v1", "two": two.url + "/v1"}, fallbacks=["two"]
        )
        with running_gateway(config) as gateway:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
    assert response.status_code == 200


def test_client_errors_are_not_retried() -> None:
    upstream = ScriptedUpstream(
        [(400, {}, {"error": {"message": "bad", "type": "x", "param": None, "code": None}})]
    )
    with ServerThread(upstream) as server:
        with running_gateway(make_config({"u": server.url + "/v1"})) as gateway:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
    assert response.status_code == 400
    assert orjson.loads(response.content)["error"]["message"] == "bad"
    assert len(upstream.calls) == 1


def test_upstream_key_is_sent_but_never_echoed() -> None:
    seen: list[bytes] = []

    async def upstream(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        seen.append(dict(scope["headers"]).get(b"authorization", b""))
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": orjson.dumps(completion("ok"))})

    with ServerThread(upstream) as server:
        config = make_config({"u": server.url + "/v1"})
        ups = dict(config.upstreams)
        from dataclasses import replace

        ups["u"] = replace(ups["u"], api_key="sk-upstream-secret")
        config = replace(config, upstreams=ups)
        with running_gateway(config) as gateway:
            response = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json=chat_body(),
                headers={"authorization": "Bearer client"},
            )
    assert seen == [b"Bearer sk-upstream-secret"]
    assert "sk-upstream-secret" not in response.text
    assert all("sk-upstream-secret" not in v for v in response.headers.values())


@pytest.mark.parametrize("name", ["lean", "aiohttp"])
def test_either_upstream_client_serves_answers_and_streams(name: str) -> None:
    with ServerThread(build_app(SimConfig())) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=CacheConfig(is_enabled=False))
        config = replace(config, server=replace(config.server, upstream_client=name))
        app = HastenApp(config)
        with ServerThread(app, lifespan="on", http=protocol_for(config.server)) as served:
            url = f"{served.url}/v1/chat/completions"
            answer = httpx.post(url, json=chat_body(), timeout=30)
            streamed = httpx.post(url, json=chat_body(stream=True), timeout=30)
            assert app.gateway is not None
            expected = LeanTransport if name == "lean" else AiohttpTransport
            assert isinstance(app.gateway.client._transport, expected)
    assert answer.status_code == 200 and answer.json()["choices"]
    assert streamed.text.endswith("data: [DONE]\n\n")

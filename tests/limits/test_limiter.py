"""A limited key through one gateway (no fleet: counted in the process, exactly)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest

from hasten.app import HastenApp
from hasten.config import GatewayConfig, TenantKey
from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.config.prices import ModelPrice
from hasten.limits.limiter import SLOT_LEASE_S, Limiter
from hasten.server.connection import protocol_for
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config
from tests.support.servers import ServerThread, free_port

KEY = "sk-limited"
FREE_KEY = "sk-free"
FROZEN_S = 1_700_000_000.0


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def limited_config(
    sim_url: str,
    limits: KeyLimits,
    *,
    key_id: str = "k1",
    redis_url: str | None = None,
    prices: dict[str, ModelPrice] | None = None,
) -> GatewayConfig:
    base = make_config({"sim": sim_url + "/v1"})
    keys = (
        TenantKey("t", KEY, key_id=key_id, limits=limits),
        TenantKey("free", FREE_KEY, key_id="free"),
    )
    # Only the limits use Redis here: the fleet's other features would talk to it too. The
    # replicas are threads sharing one GIL with the client: under load the default 0.25 s
    # op timeout lapsed once in CI, marking Redis away, so each replica admitted locally.
    # What is tested here is counting, not how a slow Redis is detected.
    fleet = FleetConfig(
        redis_url=redis_url, op_timeout_s=2.0, is_coalescing=False, is_sharing_routing=False
    )
    return replace(
        base, server=replace(base.server, api_keys=keys), fleet=fleet, prices=prices or {}
    )


@contextmanager
def gateway_of(
    config: GatewayConfig,
    clock_s: Callable[[], float] | None = None,
    slot_lease_s: float | None = None,
) -> Iterator[tuple[ServerThread, HastenApp]]:
    """A running gateway; with ``clock_s`` its limiter reads that clock (refill frozen)."""
    app = HastenApp(config)
    with ServerThread(app, lifespan="on", http=protocol_for(config.server)) as server:
        gateway = app.gateway
        assert gateway is not None
        if clock_s is not None or slot_lease_s is not None:
            gateway.limiter = gateway.pipeline.limits = Limiter(
                gateway.fleet,
                app.config.prices,
                clock_s=clock_s or time.time,
                slot_lease_s=slot_lease_s or SLOT_LEASE_S,
            )
        yield server, app


def _client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def _post(url: str, body: dict[str, Any], key: str = KEY, **headers: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )


def test_requests_per_minute_admit_then_429_with_the_headers_openai_reads(
    sim: ServerThread,
) -> None:
    config = limited_config(sim.url, KeyLimits(requests_per_minute=3))
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        client = _client(gateway.url)
        remaining = []
        for i in range(3):
            raw = client.chat.completions.with_raw_response.create(**chat_body(f"q{i}"))
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-reset-requests"] == "1m0s"
            remaining.append(raw.headers["x-ratelimit-remaining-requests"])
        assert remaining == ["2", "1", "0"]
        with pytest.raises(openai.RateLimitError) as raised:
            client.chat.completions.create(**chat_body("q3"))
        response = raised.value.response
        assert raised.value.code == "rate_limit_exceeded"
        assert response.headers["retry-after"] == "60"
        assert response.headers["retry-after-ms"] == "60000"
        assert response.headers["x-ratelimit-remaining-requests"] == "0"
        # Another key is not affected, and an unlimited key's responses carry no headers.
        free = _post(gateway.url, chat_body("q3"), FREE_KEY)
        assert free.status_code == 200
        assert not any(name.startswith("x-ratelimit") for name in free.headers)


def test_a_cache_hit_counts_as_a_request(sim: ServerThread) -> None:
    config = limited_config(sim.url, KeyLimits(requests_per_minute=2))
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        assert _post(gateway.url, chat_body("same")).headers["x-hasten-cache"] == "miss"
        hit = _post(gateway.url, chat_body("same"))
        assert hit.headers["x-hasten-cache"] == "hit"
        # Each rate header once, with the hit's own count, on a stream and a body alike.
        assert hit.headers.get_list("x-ratelimit-remaining-requests") == ["0"]
        assert hit.headers.get_list("x-ratelimit-limit-requests") == ["2"]
        assert _post(gateway.url, chat_body("same")).status_code == 429


def test_a_streamed_hit_and_miss_carry_the_rate_headers_once(sim: ServerThread) -> None:
    limits = KeyLimits(requests_per_minute=10, tokens_per_minute=100_000)
    with gateway_of(limited_config(sim.url, limits), clock_s=lambda: FROZEN_S) as (gateway, _):
        for label, remaining in (("miss", "9"), ("hit", "8")):
            response = _post(gateway.url, chat_body("streamed", stream=True))
            assert response.headers["x-hasten-cache"] == label
            assert response.headers.get_list("x-ratelimit-remaining-requests") == [remaining]
            # A hit counts against the request rate only: no token header on it.
            has_tokens = "x-ratelimit-limit-tokens" in response.headers
            assert has_tokens is (label == "miss")


def _usage(response: httpx.Response) -> int:
    usage = response.json()["usage"]
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


def test_tokens_are_counted_from_usage_and_hits_spend_none(sim: ServerThread) -> None:
    config = limited_config(sim.url, KeyLimits(tokens_per_minute=10_000))
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        body = chat_body("count my tokens please", max_tokens=40)
        first = _post(gateway.url, body, **{"cache-control": "no-cache"})
        reserved = 10_000 - int(first.headers["x-ratelimit-remaining-tokens"])
        assert reserved > 0
        used = _usage(first)
        second = _post(gateway.url, body, **{"cache-control": "no-cache"})
        # The first's reservation was replaced by its usage; the second reserves the same.
        assert int(second.headers["x-ratelimit-remaining-tokens"]) == 10_000 - used - reserved
        used += _usage(second)
        for _ in range(2):
            hit = _post(gateway.url, body)
            assert hit.headers["x-hasten-cache"] == "hit"
            # A hit reserves no tokens, so it says nothing about them.
            assert "x-ratelimit-remaining-tokens" not in hit.headers
        probe = _post(gateway.url, body, **{"cache-control": "no-cache"})
        # The hits spent nothing: the probe sees the two misses' usage and its own estimate.
        assert int(probe.headers["x-ratelimit-remaining-tokens"]) == 10_000 - used - reserved


def test_a_stream_without_usage_asked_is_still_counted_from_usage(sim: ServerThread) -> None:
    config = limited_config(sim.url, KeyLimits(tokens_per_minute=10_000))
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        first = _post(gateway.url, chat_body("a stored stream", stream=True, max_tokens=300))
        assert b'"prompt_tokens"' not in first.content  # the gateway asked, the client did not
        # Reserved: the prompt's estimate and the 300 tokens it may answer with.
        assert 9600 < int(first.headers["x-ratelimit-remaining-tokens"]) <= 9700
        probe = _post(
            gateway.url, chat_body("probe", max_tokens=1), **{"cache-control": "no-cache"}
        )
        # The first's 300 completion tokens were counted (from the usage only Hasten saw).
        assert 10_000 - int(probe.headers["x-ratelimit-remaining-tokens"]) > 300


def test_a_budget_is_checked_before_and_charged_after(sim: ServerThread) -> None:
    price = ModelPrice(input_usd_per_1m_tokens=1000.0, output_usd_per_1m_tokens=1000.0)
    config = limited_config(sim.url, KeyLimits(budget_usd=0.05), prices={"sim-model": price})
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        client = _client(gateway.url)
        # 60 completion tokens and the prompt at $0.001 a token: over the $0.05 budget.
        first = client.chat.completions.with_raw_response.create(
            **chat_body("spend", max_tokens=60)
        )
        assert first.http_response.status_code == 200
        with pytest.raises(openai.RateLimitError) as raised:
            client.chat.completions.create(**chat_body("more"))
        assert raised.value.code == "insufficient_quota"
        assert int(raised.value.response.headers["retry-after"]) > 0


def test_a_hit_spends_no_budget(sim: ServerThread) -> None:
    price = ModelPrice(input_usd_per_1m_tokens=1000.0, output_usd_per_1m_tokens=1000.0)
    config = limited_config(sim.url, KeyLimits(budget_usd=0.05), prices={"*": price})
    with gateway_of(config, clock_s=lambda: FROZEN_S) as (gateway, _):
        body = chat_body("cheap", max_tokens=5)
        miss = _post(gateway.url, body)
        assert 0.0 < _usage(miss) * 0.001 * 8 > 0.05 > _usage(miss) * 0.001
        # Eight hits would spend more than the budget, were hits charged.
        for _ in range(8):
            hit = _post(gateway.url, body)
            assert (hit.status_code, hit.headers["x-hasten-cache"]) == (200, "hit")


async def _hold_streams(url: str, num_streams: int) -> list[httpx.Response]:
    """Opens ``num_streams`` slow streams, reads each one's first bytes, then drops them."""
    async with httpx.AsyncClient(timeout=30) as client:
        requests = [
            client.build_request(
                "POST",
                url + "/v1/chat/completions",
                json=chat_body(f"slow {i}", stream=True, max_tokens=500),
                headers={"authorization": f"Bearer {KEY}", "cache-control": "no-store"},
            )
            for i in range(num_streams)
        ]
        responses = [await client.send(r, stream=True) for r in requests]
        # Kept: a dropped iterator is closed by the garbage collector, and its connection.
        bodies = [response.aiter_raw() for response in responses]
        for response, body in zip(responses, bodies, strict=True):
            if response.status_code == 200:
                await anext(body)
        third = await client.post(
            url + "/v1/chat/completions",
            json=chat_body("third"),
            headers={"authorization": f"Bearer {KEY}"},
        )
        for response in responses:
            await response.aclose()  # the client goes away mid-stream
        return [*responses, third]


def wait_admitted(url: str, *, timeout_s: float = 10.0) -> httpx.Response:
    """Retries until a request is admitted (a released slot); bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = _post(url, chat_body("after"), **{"cache-control": "no-store"})
        if response.status_code != 429 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


@pytest.fixture()
def slow_sim() -> Iterator[ServerThread]:
    """Streams that take 500 x 20 ms: open for as long as a test needs."""
    with ServerThread(build_app(SimConfig(decode_ms_per_token=20.0))) as server:
        yield server


def test_concurrent_requests_are_capped_and_slots_freed_on_disconnect(
    slow_sim: ServerThread,
) -> None:
    config = limited_config(slow_sim.url, KeyLimits(max_concurrent=2))
    with gateway_of(config) as (gateway, app):
        held = asyncio.run(_hold_streams(gateway.url, 2))
        assert [r.status_code for r in held] == [200, 200, 429]
        assert held[2].json()["error"]["code"] == "rate_limit_exceeded"
        assert held[2].headers["retry-after"] == "1"
        # The two clients left mid-stream (10 s of answer to go): their slots are free.
        assert wait_admitted(gateway.url).status_code == 200
        assert app.gateway is not None
        assert app.gateway.limiter.num_local_admissions >= 4


async def _retry_behind_a_stream(url: str) -> tuple[str, float]:
    """One slow stream holds the key's only slot; the SDK, told to retry, waits it out."""
    async with httpx.AsyncClient(timeout=30) as http:
        request = http.build_request(
            "POST",
            url + "/v1/chat/completions",
            json=chat_body("holder", stream=True, max_tokens=100),  # about 2 s of answer
            headers={"authorization": f"Bearer {KEY}", "cache-control": "no-store"},
        )
        holder = await http.send(request, stream=True)
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=6)
        started_s = time.monotonic()
        answer = await client.chat.completions.create(**chat_body("waiter"))
        waited_s = time.monotonic() - started_s
        await holder.aread()
        await holder.aclose()
        await client.close()
        return answer.choices[0].message.content or "", waited_s


def test_the_openai_sdk_honours_retry_after(slow_sim: ServerThread) -> None:
    config = limited_config(slow_sim.url, KeyLimits(max_concurrent=1))
    with gateway_of(config) as (gateway, app):
        content, waited_s = asyncio.run(_retry_behind_a_stream(gateway.url))
        assert content
        assert app.gateway is not None
        assert app.gateway.stats.counts["error_429"] >= 1  # refused first, then admitted
        # The SDK slept the 1 s retry-after-ms said (its own backoff starts at 0.5 s).
        assert waited_s >= 1.0


def test_a_failed_request_carries_the_headers_and_frees_its_slot() -> None:
    dead_upstream = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    limits = KeyLimits(requests_per_minute=10, tokens_per_minute=1000, max_concurrent=1)
    with gateway_of(limited_config(dead_upstream, limits)) as (gateway, _):
        for i in range(2):  # the second finds the first's slot free again
            body = chat_body("no answer", max_tokens=10)
            failed = _post(gateway.url, body, **{"cache-control": "no-store"})
            assert failed.status_code == 502
            assert failed.headers["x-ratelimit-remaining-requests"] == str(9 - i)
            assert int(failed.headers["x-ratelimit-remaining-tokens"]) < 1000


async def _hit_behind_a_stream(url: str, cached: dict[str, object]) -> list[httpx.Response]:
    """One slow stream holds the key's only slot; then a cached question, then a new one."""
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=30) as http:
        request = http.build_request(
            "POST",
            url + "/v1/chat/completions",
            json=chat_body("holder", stream=True, max_tokens=500),
            headers={**headers, "cache-control": "no-store"},
        )
        holder = await http.send(request, stream=True)
        body = holder.aiter_raw()  # kept: a dropped iterator closes the stream
        await anext(body)
        hit = await http.post(url + "/v1/chat/completions", json=cached, headers=headers)
        miss = await http.post(url + "/v1/chat/completions", json=chat_body("new"), headers=headers)
        await holder.aclose()
        return [holder, hit, miss]


def test_a_cache_hit_takes_no_concurrency_slot(slow_sim: ServerThread) -> None:
    config = limited_config(slow_sim.url, KeyLimits(max_concurrent=1))
    with gateway_of(config) as (gateway, _):
        cached = chat_body("short", max_tokens=2)
        assert _post(gateway.url, cached).status_code == 200
        holder, hit, miss = asyncio.run(_hit_behind_a_stream(gateway.url, cached))
        assert holder.status_code == 200
        assert (hit.status_code, hit.headers["x-hasten-cache"]) == (200, "hit")
        assert miss.status_code == 429  # the slot is the stream's

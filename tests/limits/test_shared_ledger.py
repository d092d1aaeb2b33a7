"""Limits shared by replicas through one Redis: three in-process gateways, one key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest
import redis

from hasten.app import HastenApp
from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.limits.limiter import Limiter
from hasten.limits.shared_ledger import Settlement
from hasten.simulator import SimConfig, build_app
from tests.limits.test_limiter import FREE_KEY, KEY, gateway_of, limited_config
from tests.support.gateway import chat_body
from tests.support.servers import ServerThread, free_port, redis_server

NUM_REPLICAS = 3


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


@contextmanager
def replicas(
    sim_url: str, limits: KeyLimits, redis_url: str, slot_lease_s: float | None = None
) -> Iterator[list[tuple[ServerThread, HastenApp]]]:
    """Three gateways sharing ``redis_url``, with one fresh limited key."""
    config = limited_config(sim_url, limits, key_id=uuid.uuid4().hex, redis_url=redis_url)
    with ExitStack() as stack:
        yield [
            stack.enter_context(gateway_of(config, slot_lease_s=slot_lease_s))
            for _ in range(NUM_REPLICAS)
        ]


async def _burst(urls: list[str], num_requests: int, max_in_flight: int) -> list[int]:
    """``num_requests`` spread round robin over ``urls``, ``max_in_flight`` at a time."""
    gate = asyncio.Semaphore(max_in_flight)
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(i: int) -> int:
            async with gate:
                response = await client.post(
                    urls[i % len(urls)] + "/v1/chat/completions",
                    json=chat_body(f"q{i % 7}"),
                    headers={"authorization": f"Bearer {KEY}"},
                )
                return response.status_code

        return await asyncio.gather(*(one(i) for i in range(num_requests)))


def test_a_100_per_minute_key_admits_100_across_three_replicas(
    sim: ServerThread, redis_url: str
) -> None:
    with replicas(sim.url, KeyLimits(requests_per_minute=100), redis_url) as fleet:
        statuses = asyncio.run(_burst([s.url for s, _ in fleet], 300, max_in_flight=30))
        assert statuses.count(200) == 100
        assert statuses.count(429) == 200
        for _, app in fleet:
            assert app.gateway is not None and app.gateway.limiter.num_local_admissions == 0


def test_an_unlimited_key_makes_no_redis_call(sim: ServerThread, redis_url: str) -> None:
    probe = redis.Redis.from_url(redis_url)

    def commands() -> int:
        return int(probe.info("stats")["total_commands_processed"])

    with replicas(sim.url, KeyLimits(requests_per_minute=5), redis_url) as fleet:
        url = fleet[0][0].url
        idle = -commands() + commands()  # what reading the counter itself costs
        before = commands()
        for i in range(10):
            response = httpx.post(
                url + "/v1/chat/completions",
                json=chat_body(f"free {i % 2}"),
                headers={"authorization": f"Bearer {FREE_KEY}"},
            )
            assert response.status_code == 200
        assert commands() - before == idle
        limited = httpx.post(
            url + "/v1/chat/completions",
            json=chat_body("limited"),
            headers={"authorization": f"Bearer {KEY}"},
        )
        assert limited.status_code == 200
        assert commands() - before > 2 * idle  # the limited key's admit and settle
    probe.close()


async def _hold_then_probe(
    hold_urls: list[str], probe_url: str, hold_s: float
) -> tuple[list[int], list[int]]:
    """Slow streams held on ``hold_urls``; a request to ``probe_url`` at once and after
    ``hold_s`` (slots renewed meanwhile); then the streams' clients leave."""
    async with httpx.AsyncClient(timeout=30) as client:
        headers = {"authorization": f"Bearer {KEY}", "cache-control": "no-store"}
        responses = []
        for i, url in enumerate(hold_urls):
            request = client.build_request(
                "POST",
                url + "/v1/chat/completions",
                json=chat_body(f"slow {i}", stream=True, max_tokens=500),
                headers=headers,
            )
            responses.append(await client.send(request, stream=True))
        bodies = [response.aiter_raw() for response in responses]
        for body in bodies:
            await anext(body)
        probes = []
        for delay_s in (0.0, hold_s):
            await asyncio.sleep(delay_s)
            probe = await client.post(
                probe_url + "/v1/chat/completions", json=chat_body("probe"), headers=headers
            )
            probes.append(probe.status_code)
        for response in responses:
            await response.aclose()
        return [r.status_code for r in responses], probes


def test_concurrency_is_capped_fleet_wide_and_slots_come_back(redis_url: str) -> None:
    with (
        ServerThread(build_app(SimConfig(decode_ms_per_token=20.0))) as slow_sim,
        replicas(slow_sim.url, KeyLimits(max_concurrent=2), redis_url, slot_lease_s=0.3) as fleet,
    ):
        urls = [s.url for s, _ in fleet]
        # Held 1 s, over three leases of 0.3 s: only renewals keep the slots taken.
        held, probes = asyncio.run(_hold_then_probe(urls[:2], urls[2], hold_s=1.0))
        assert held == [200, 200]
        assert probes == [429, 429]
        deadline = time.monotonic() + 10
        while True:  # the leaving clients' slots are released (bounded wait)
            response = httpx.post(
                urls[2] + "/v1/chat/completions",
                json=chat_body("after", max_tokens=2),
                headers={"authorization": f"Bearer {KEY}", "cache-control": "no-store"},
            )
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert response.status_code == 200


def test_redis_away_limits_per_replica_with_a_warning(
    sim: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    shared_redis = redis_server(free_port())
    url = shared_redis.__enter__()
    is_stopped = False
    try:
        with replicas(sim.url, KeyLimits(requests_per_minute=2), url) as fleet:
            urls = [s.url for s, _ in fleet]
            assert asyncio.run(_burst(urls, 6, max_in_flight=1)).count(200) == 2  # fleet-wide
            shared_redis.__exit__(None, None, None)  # Redis goes away
            is_stopped = True
            with caplog.at_level(logging.WARNING, logger="hasten.fleet"):
                # Each replica counts its own 2 per minute now: 3 x 2 of 9.
                assert asyncio.run(_burst(urls, 9, max_in_flight=1)).count(200) == 6
            assert any("fleet redis" in r.getMessage() for r in caplog.records)
            for _, app in fleet:
                assert app.gateway is not None and app.gateway.limiter.num_local_admissions == 3
    finally:
        if not is_stopped:
            shared_redis.__exit__(None, None, None)


def test_tokens_used_behind_one_replica_count_on_the_others(
    sim: ServerThread, redis_url: str
) -> None:
    with replicas(sim.url, KeyLimits(tokens_per_minute=600), redis_url) as fleet:
        (first, _), (second, _), _ = fleet
        headers = {"authorization": f"Bearer {KEY}", "cache-control": "no-store"}
        used = httpx.post(
            first.url + "/v1/chat/completions",
            json=chat_body("long answer", max_tokens=300),
            headers=headers,
        )
        usage = used.json()["usage"]
        assert usage["completion_tokens"] == 300
        probe = httpx.post(
            second.url + "/v1/chat/completions", json=chat_body("probe"), headers=headers
        )
        # The bucket refills 10 tokens a second: the 300 are still missing on replica two.
        assert int(probe.headers["x-ratelimit-remaining-tokens"]) < 600 - 300


def test_redis_lost_between_admit_and_settle_loses_only_the_correction() -> None:
    """Admitted in Redis, Redis gone by the end: settling neither fails nor keeps renewing."""

    async def run(url: str, server: contextlib.AbstractContextManager[str]) -> list[object]:
        link = FleetLink(FleetConfig(redis_url=url))
        limiter = Limiter(link)
        limits = KeyLimits(max_concurrent=1, tokens_per_minute=100)
        try:
            first = await limiter.reserve("lost", limits, "r1", 10)
            assert limiter.num_held_slots == 1
            server.__exit__(None, None, None)  # Redis goes away mid-request
            limiter.finish("lost", limits, first, 10, Settlement("r1", limits, 5, 0.0))
            after = await limiter.reserve("lost", limits, "r2", 10)
            assert limiter.num_held_slots == 0  # nothing left to renew
            return [
                first.verdict.is_allowed,
                first.is_shared,
                after.verdict.is_allowed,
                after.is_shared,
            ]
        finally:
            await limiter.aclose()
            await link.aclose()

    server = redis_server(free_port())
    url = server.__enter__()
    # The second admission is counted on this replica (Redis away): allowed, not shared.
    assert asyncio.run(run(url, server)) == [True, True, True, False]

"""Routing against real simulators on loopback: hedges, TTFT failover, breakers, affinity, probes.

Latencies are chosen with wide margins (a 300 ms hedge delay against a 3 s straggler) so a
noisy machine cannot flip an outcome; no test asserts that anything was fast.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from hasten.config import (
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    ServerConfig,
    TimeoutConfig,
    UpstreamConfig,
)
from hasten.config.routing import BreakerConfig, DeploymentConfig, HedgeConfig, RoutingConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import FAST_RETRY, chat_body, running_gateway, sim_stats
from tests.support.servers import ServerThread

ADMIN_KEY = "routing-admin-key"
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN_KEY}"}
ALWAYS_HEDGE = HedgeConfig(
    is_enabled=True, min_delay_ms=50, max_delay_ms=300, min_samples=10_000, budget=1.0
)


def routed_config(
    sims: dict[str, ServerThread],
    routing: RoutingConfig,
    deployments: Sequence[DeploymentConfig] = (),
    *,
    retry: RetryConfig = FAST_RETRY,
    total_s: float = 30.0,
    cache: CacheConfig | None = None,
    is_stream_upstream: bool = True,
) -> GatewayConfig:
    timeouts = TimeoutConfig(total_s=total_s)
    upstreams = {
        name: UpstreamConfig(
            name=name,
            url=sim.url + "/v1",
            timeouts=timeouts,
            retry=retry,
            is_stream_upstream=is_stream_upstream,
        )
        for name, sim in sims.items()
    }
    deps = tuple(deployments) or tuple(DeploymentConfig(upstream=n) for n in sims)
    route = ModelRoute(
        name="*",
        upstream=deps[0].upstream,
        fallbacks=tuple(d.upstream for d in deps[1:]),
        routing=replace(routing, deployments=deps),
    )
    return GatewayConfig(
        server=ServerConfig(admin_api_key=ADMIN_KEY),
        upstreams=upstreams,
        models={"*": route},
        cache=cache or CacheConfig(is_enabled=False),
    )


@contextmanager
def simulators(**configs: SimConfig) -> Iterator[dict[str, ServerThread]]:
    with ExitStack() as stack:
        yield {n: stack.enter_context(ServerThread(build_app(c))) for n, c in configs.items()}


def stream_events(response: httpx.Response) -> list[bytes]:
    return [
        line[len(b"data: ") :]
        for line in response.content.split(b"\n")
        if line.startswith(b"data: ")
    ]


def content_pieces(events: list[bytes]) -> list[str]:
    pieces = []
    for event in events:
        if event == b"[DONE]":
            continue
        for choice in orjson.loads(event).get("choices", []):
            content = choice.get("delta", {}).get("content")
            if content:
                pieces.append(content)
    return pieces


def wait_for(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def post_chat(gateway: ServerThread, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=60.0
    )


def routing_state(gateway: ServerThread) -> dict[str, Any]:
    response = httpx.get(f"{gateway.url}/admin/routing", headers=ADMIN_HEADERS)
    return response.json()["models"]["*"]  # type: ignore[no-any-return]


# --- hedging --------------------------------------------------------------------------


def test_hedge_wins_and_the_straggler_is_cancelled() -> None:
    with simulators(
        slow=SimConfig(ttft_base_ms=3000, output_tokens=5),
        fast=SimConfig(ttft_base_ms=50, decode_ms_per_token=5, output_tokens=9),
    ) as sims:
        config = routed_config(
            sims,
            RoutingConfig(hedge=ALWAYS_HEDGE),
            [DeploymentConfig("slow"), DeploymentConfig("fast", priority=1)],
        )
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("hedge me", stream=True))
            state = routing_state(gateway)
        assert response.status_code == 200
        assert response.headers["x-hasten-upstream"] == "fast"
        assert response.headers["x-hasten-hedge"] == "won"
        events = stream_events(response)
        # Only the winner's chunks: nine pieces (the straggler would have sent five).
        assert len(content_pieces(events)) == 9 and events.count(b"[DONE]") == 1
        assert wait_for(lambda: sim_stats(sims["slow"].url)["num_cancelled"] == 1)
        assert sim_stats(sims["slow"].url)["num_completion_tokens"] == 0
        assert state["hedges"] == 1 and state["deployments"]["slow"]["cancelled"] == 1


def test_primary_that_answers_first_wins_and_the_hedge_is_cancelled() -> None:
    with simulators(
        primary=SimConfig(ttft_base_ms=700, output_tokens=4),
        backup=SimConfig(ttft_base_ms=6000, output_tokens=11),
    ) as sims:
        one_hedge = dataclasses.replace(ALWAYS_HEDGE, max_hedges=1)  # the second would lose too
        config = routed_config(
            sims,
            RoutingConfig(hedge=one_hedge),
            [DeploymentConfig("primary"), DeploymentConfig("backup", priority=1)],
        )
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("race", stream=True))
        assert response.headers["x-hasten-upstream"] == "primary"
        assert response.headers["x-hasten-hedge"] == "lost"
        assert len(content_pieces(stream_events(response))) == 4
        assert wait_for(lambda: sim_stats(sims["backup"].url)["num_cancelled"] == 1)


def test_non_idempotent_requests_are_never_hedged() -> None:
    with simulators(slow=SimConfig(ttft_base_ms=800), fast=SimConfig()) as sims:
        config = routed_config(
            sims,
            RoutingConfig(hedge=ALWAYS_HEDGE),
            [DeploymentConfig("slow"), DeploymentConfig("fast", priority=1)],
        )
        with running_gateway(config) as gateway:
            response = post_chat(
                gateway, chat_body("once only", stream=True), **{"x-hasten-idempotent": "false"}
            )
        assert response.headers["x-hasten-upstream"] == "slow"
        assert "x-hasten-hedge" not in response.headers
        assert sim_stats(sims["fast"].url)["num_requests"] == 0


def test_hedge_budget_denies_extra_requests() -> None:
    hedge = replace(ALWAYS_HEDGE, budget=0.05, budget_burst=0.0)  # the sliding window
    with simulators(slow=SimConfig(ttft_base_ms=800), fast=SimConfig()) as sims:
        config = routed_config(
            sims,
            RoutingConfig(hedge=hedge),
            [DeploymentConfig("slow"), DeploymentConfig("fast", priority=1)],
        )
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("no budget yet", stream=True))
            state = routing_state(gateway)
        # One request in the window buys 0.05 of a hedge: not enough.
        assert response.headers["x-hasten-hedge"] == "denied"
        assert sim_stats(sims["fast"].url)["num_requests"] == 0
        assert state["hedge_budget"]["denied"] == 1


# --- TTFT timeout and failover --------------------------------------------------------


def test_ttft_timeout_fails_over_within_the_deadline() -> None:
    with simulators(stall=SimConfig(ttft_base_ms=60_000), ok=SimConfig(output_tokens=6)) as sims:
        config = routed_config(
            sims,
            RoutingConfig(),
            [DeploymentConfig("stall", ttft_timeout_s=0.3), DeploymentConfig("ok", priority=1)],
            total_s=20.0,  # far below the stall: success means the failover beat the deadline
        )
        with running_gateway(config) as gateway:
            streamed = post_chat(gateway, chat_body("stream", stream=True))
            whole = post_chat(gateway, chat_body("whole"))
        for response in (streamed, whole):
            assert response.status_code == 200
            assert response.headers["x-hasten-upstream"] == "ok"
            assert response.headers["x-hasten-failover"] == "stall=ttft_timeout"
        assert len(content_pieces(stream_events(streamed))) == 6
        assert whole.json()["choices"][0]["message"]["content"]
        assert wait_for(lambda: sim_stats(sims["stall"].url)["num_cancelled"] == 2)


def test_a_non_stream_request_is_hedged_on_its_first_token() -> None:
    """Asked upstream as a stream (hasten.proxy.assemble), a request whose client does not
    stream is raced like a stream: the straggler's missing first token fires the hedge."""
    with simulators(
        slow=SimConfig(ttft_base_ms=3000, output_tokens=5),
        fast=SimConfig(ttft_base_ms=50, decode_ms_per_token=5, output_tokens=9),
    ) as sims:
        config = routed_config(
            sims,
            RoutingConfig(hedge=ALWAYS_HEDGE),
            [DeploymentConfig("slow"), DeploymentConfig("fast", priority=1)],
        )
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("hedge me whole"))
        assert response.status_code == 200
        assert response.headers["x-hasten-upstream"] == "fast"
        assert response.headers["x-hasten-hedge"] == "won"
        assert response.json()["usage"]["completion_tokens"] == 9
        assert wait_for(lambda: sim_stats(sims["slow"].url)["num_cancelled"] == 1)


@pytest.mark.parametrize("is_stream_upstream", [True, False])
def test_a_long_non_stream_answer_with_a_quick_first_token_is_not_a_ttft_timeout(
    is_stream_upstream: bool,
) -> None:
    """The TTFT timeout times the first token, not the whole answer. Asked as a stream, a
    long answer that starts at once stays on its deployment; asked whole
    (``stream_upstream = false``), its "first byte" is the last and the timeout fails it over."""
    with simulators(
        long=SimConfig(ttft_base_ms=20, decode_ms_per_token=150, output_tokens=8),
        ok=SimConfig(output_tokens=3),
    ) as sims:
        config = routed_config(
            sims,
            RoutingConfig(),
            [DeploymentConfig("long", ttft_timeout_s=0.4), DeploymentConfig("ok", priority=1)],
            is_stream_upstream=is_stream_upstream,
        )
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("a long answer"))
    assert response.status_code == 200
    if is_stream_upstream:
        assert response.headers["x-hasten-upstream"] == "long"
        assert "x-hasten-failover" not in response.headers
        assert response.json()["usage"]["completion_tokens"] == 8
    else:
        assert response.headers["x-hasten-upstream"] == "ok"
        assert response.headers["x-hasten-failover"] == "long=ttft_timeout"


def test_when_every_deployment_stalls_the_client_gets_a_timeout() -> None:
    with simulators(one=SimConfig(ttft_base_ms=60_000), two=SimConfig(ttft_base_ms=60_000)) as sims:
        config = routed_config(sims, RoutingConfig(ttft_timeout_s=0.2), total_s=20.0)
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("nobody home", stream=True))
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "upstream_ttft_timeout"
        for sim in sims.values():
            assert wait_for(lambda s=sim: sim_stats(s.url)["num_cancelled"] == 1)


# --- breakers -------------------------------------------------------------------------


def test_429_with_retry_after_trips_the_breaker_and_traffic_moves() -> None:
    with simulators(
        limited=SimConfig(rate_limit_rate=1.0, retry_after_s=30), ok=SimConfig()
    ) as sims:
        config = routed_config(
            sims, RoutingConfig(), [DeploymentConfig("limited"), DeploymentConfig("ok", priority=1)]
        )
        with running_gateway(config) as gateway:
            first = post_chat(gateway, chat_body("one"))
            later = [post_chat(gateway, chat_body(f"later {i}")) for i in range(4)]
            state = routing_state(gateway)
        assert first.status_code == 200 and first.headers["x-hasten-failover"] == "limited=429"
        for response in later:
            assert response.headers["x-hasten-upstream"] == "ok"
            assert response.headers["x-hasten-route"] == "priority"
            assert "x-hasten-failover" not in response.headers
        assert sim_stats(sims["limited"].url)["num_requests"] == 1
        breaker = state["deployments"]["limited"]["breaker"]
        assert breaker["state"] == "open" and breaker["reopens_in_s"] > 20


def test_tripped_breaker_recovers_through_a_half_open_probe() -> None:
    breaker = BreakerConfig(
        # Long enough that a slow machine cannot outlast it between the trip and the
        # "still open" checks below; the wait after them is what the test pays for it.
        max_consecutive_failures=2,
        min_requests=2,
        window_size=10,
        cooldown_s=3.0,
    )
    with simulators(flaky=SimConfig(error_rate=1.0), ok=SimConfig()) as sims:
        config = routed_config(
            sims,
            RoutingConfig(breaker=breaker),
            [DeploymentConfig("flaky"), DeploymentConfig("ok", priority=1)],
            retry=RetryConfig(max_retries=0),
        )
        with running_gateway(config) as gateway:
            failed_over = [post_chat(gateway, chat_body(f"try {i}")) for i in range(2)]
            skipped = post_chat(gateway, chat_body("skip"))
            assert routing_state(gateway)["deployments"]["flaky"]["breaker"]["state"] == "open"
            assert sim_stats(sims["flaky"].url)["num_requests"] == 2  # skipped while open
            httpx.post(f"{sims['flaky'].url}/sim/config", json={"error_rate": 0.0})
            time.sleep(3.1)  # the cooldown; a lower bound, longer is fine
            recovered = post_chat(gateway, chat_body("probe"))
            after = post_chat(gateway, chat_body("after"))
            state = routing_state(gateway)
        assert all(r.headers["x-hasten-failover"] == "flaky=500" for r in failed_over)
        assert skipped.headers["x-hasten-upstream"] == "ok"
        assert recovered.headers["x-hasten-upstream"] == "flaky"
        assert after.headers["x-hasten-upstream"] == "flaky"
        assert state["deployments"]["flaky"]["breaker"]["state"] == "closed"


def test_stream_that_dies_midway_ends_with_an_error_event() -> None:
    with simulators(dying=SimConfig(disconnect_rate=1.0, output_tokens=10)) as sims:
        config = routed_config(sims, RoutingConfig())
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("die", stream=True))
            state = routing_state(gateway)
        events = stream_events(response)
        assert response.headers["x-hasten-upstream"] == "dying"
        assert 0 < len(content_pieces(events)) < 10
        assert b"[DONE]" not in events
        assert orjson.loads(events[-1])["error"]["type"] == "upstream_error"
        assert state["deployments"]["dying"]["failures"] == 1


# --- prefix affinity ------------------------------------------------------------------

SYSTEM_PROMPT = "You answer questions about the hasten gateway, tersely. " * 40
AFFINITY = RoutingConfig(affinity_min_prefix_chars=500)


def affinity_body(question: str) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        "temperature": 0.9,
    }


def test_same_prefix_sticks_to_one_deployment_until_it_is_down() -> None:
    with simulators(a=SimConfig(), b=SimConfig(), c=SimConfig()) as sims:
        with running_gateway(routed_config(sims, AFFINITY)) as gateway:
            first = [post_chat(gateway, affinity_body(f"question {i}")) for i in range(8)]
            homes = {r.headers["x-hasten-upstream"] for r in first}
            assert len(homes) == 1 and all(r.headers["x-hasten-route"] == "affinity" for r in first)
            home = homes.pop()
            stats = sim_stats(sims[home].url)
            assert stats["num_requests"] == 8 and stats["prefix_cache_hit_ratio"] > 0.5
            sims[home].stop()
            second = [post_chat(gateway, affinity_body(f"again {i}")) for i in range(8)]
        assert all(r.status_code == 200 for r in second)
        new_homes = {r.headers["x-hasten-upstream"] for r in second}
        assert len(new_homes) == 1 and home not in new_homes


async def test_same_prefix_spills_over_when_its_home_is_overloaded() -> None:
    configs = {n: SimConfig(ttft_base_ms=500) for n in ("a", "b", "c")}
    with simulators(**configs) as sims:
        with running_gateway(routed_config(sims, AFFINITY)) as gateway:
            async with httpx.AsyncClient(timeout=60.0) as client:
                url = f"{gateway.url}/v1/chat/completions"
                replies = await asyncio.gather(
                    *(client.post(url, json=affinity_body(f"burst {i}")) for i in range(9))
                )
    used = {r.headers["x-hasten-upstream"] for r in replies}
    assert all(r.status_code == 200 for r in replies)
    assert len(used) > 1  # bounded load: nine at once do not all land on one home


def test_cache_misses_carry_routing_headers_through_the_flight() -> None:
    with simulators(only=SimConfig()) as sims:
        config = routed_config(sims, RoutingConfig(), cache=CacheConfig(backend="memory"))
        with running_gateway(config) as gateway:
            miss = post_chat(gateway, chat_body("cache me"))
            hit = post_chat(gateway, chat_body("cache me"))
        assert miss.headers["x-hasten-cache"] == "miss"
        assert miss.headers["x-hasten-upstream"] == "only"
        assert hit.headers["x-hasten-cache"] == "hit"


def test_hedging_with_nowhere_to_hedge_just_waits() -> None:
    with simulators(only=SimConfig(ttft_base_ms=600, output_tokens=3)) as sims:
        config = routed_config(sims, RoutingConfig(hedge=ALWAYS_HEDGE))
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("alone", stream=True))
        assert response.status_code == 200
        assert response.headers["x-hasten-upstream"] == "only"
        assert "x-hasten-hedge" not in response.headers
        assert len(content_pieces(stream_events(response))) == 3


# --- headers on raised errors, active probes -------------------------------------------


def test_a_raised_error_carries_the_routing_headers() -> None:
    slow = SimConfig(ttft_base_ms=3000)
    with simulators(a=slow, b=slow) as sims:
        config = routed_config(sims, RoutingConfig(ttft_timeout_s=0.2))
        with running_gateway(config) as gateway:
            response = post_chat(gateway, chat_body("too slow", stream=True))
    assert response.status_code == 504
    assert response.headers["x-hasten-upstream"] in ("a", "b")
    failovers = response.headers["x-hasten-failover"]
    assert "a=ttft_timeout" in failovers and "b=ttft_timeout" in failovers


def test_active_probes_measure_each_deployments_round_trip() -> None:
    with simulators(a=SimConfig(), b=SimConfig()) as sims:
        config = routed_config(sims, RoutingConfig(probe_interval_s=0.05))
        with running_gateway(config) as gateway:
            assert post_chat(gateway, chat_body("start the pool")).status_code == 200
            deadline_s = time.monotonic() + 30.0
            state: dict[str, Any] = routing_state(gateway)
            while time.monotonic() < deadline_s and any(
                d["probe_rtt_ms"] is None for d in state["deployments"].values()
            ):
                time.sleep(0.05)
                state = routing_state(gateway)
    assert all(d["probe_rtt_ms"] > 0 for d in state["deployments"].values())

"""Routing odds and ends: headers on raised errors, active probes, ``prompt_cache_key``."""

from __future__ import annotations

import random
import time
from typing import Any, cast

import orjson

from hasten.config import UpstreamConfig
from hasten.routing.pool import DeploymentPool
from hasten.routing.settings import DeploymentConfig, RoutingConfig
from hasten.simulator import SimConfig
from hasten.upstream.dispatch import Dispatch, RouteRequest
from hasten.upstream.transport import Transport
from tests.gateway_fixtures import chat_body, running_gateway
from tests.routing.test_gateway import post_chat, routed_config, routing_state, simulators


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


def _spec_body(is_prompt_cache_key: bool, body: dict[str, Any], key: int | None) -> Any:
    deployment = DeploymentConfig(upstream="a", is_prompt_cache_key=is_prompt_cache_key)
    pool = DeploymentPool([deployment], RoutingConfig(), random.Random(1))
    dispatch = Dispatch(
        cast(Transport, None),  # never used: the spec is built, not sent
        pool,
        {"a": UpstreamConfig(name="a", url="http://127.0.0.1:9/v1")},
        RouteRequest(model="m", affinity_key=key),
        path="/chat/completions",
        body=orjson.dumps(body),
        headers={},
        rng=random.Random(1),
    )
    return orjson.loads(dispatch._spec("a").body)


def test_prompt_cache_key_is_set_only_for_upstreams_configured_with_it() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert _spec_body(True, body, 0xABC)["prompt_cache_key"] == "hasten-0000000000000abc"
    assert "prompt_cache_key" not in _spec_body(False, body, 0xABC)
    assert "prompt_cache_key" not in _spec_body(True, body, None)  # no affinity key
    own = {**body, "prompt_cache_key": "mine"}
    assert _spec_body(True, own, 0xABC)["prompt_cache_key"] == "mine"  # the client's wins

"""Routing odds and ends: headers on raised errors, active probes."""

from __future__ import annotations

import time
from typing import Any

from hasten.routing.settings import RoutingConfig
from hasten.simulator import SimConfig
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

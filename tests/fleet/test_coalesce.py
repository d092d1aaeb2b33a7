"""Coalescing across replicas: in-process gateways sharing one real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import redis

from hasten.config import GatewayConfig
from hasten.config.fleet import FleetConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread, redis_server

URL = "/v1/chat/completions"


def fleet_config(sim_url: str, redis_url: str, **fleet: Any) -> GatewayConfig:
    config = make_config({"sim": sim_url + "/v1"})
    return replace(config, fleet=FleetConfig(redis_url=redis_url, **fleet))


@contextlib.contextmanager
def replicas(config: GatewayConfig, count: int) -> Iterator[list[ServerThread]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_gateway(config)) for _ in range(count)]


def stream_text(body: str) -> str:
    text = ""
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = orjson.loads(line[6:])
        assert "error" not in event, event
        for choice in event["choices"]:
            text += choice["delta"].get("content") or ""
    return text


async def ask(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> str:
    """The answer's text, stream or not; fails on any error."""
    response = await http.post(base + URL, json=body)
    assert response.status_code == 200, response.text
    if body.get("stream"):
        assert response.text.endswith("data: [DONE]\n\n"), response.text[-300:]
        return stream_text(response.text)
    return str(response.json()["choices"][0]["message"]["content"])


async def test_identical_requests_over_replicas_make_one_upstream_call() -> None:
    sim_config = SimConfig(ttft_base_ms=150, decode_ms_per_token=10, output_tokens=30)
    with redis_server() as redis_url, ServerThread(build_app(sim_config)) as sim:
        with replicas(fleet_config(sim.url, redis_url), 3) as gateways:
            async with httpx.AsyncClient(timeout=30) as http:
                asks = [
                    ask(
                        http,
                        gateways[i % 3].url,
                        chat_body("fleet coalesce", stream=i % 2 == 0, max_tokens=30),
                    )
                    for i in range(24)
                ]
                texts = await asyncio.gather(*asks)
            assert len(set(texts)) == 1 and texts[0]
            assert sim_stats(sim.url)["num_requests"] == 1

"""Upstream failure paths: a cut-off answer is retried, every attempt is accounted for.

Real simulators and real gateways on loopback; the only stand-ins are upstreams that refuse
connections (a free port) and a URL that aiohttp itself rejects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hasten.config import CacheConfig, RetryConfig
from hasten.simulator import SimConfig, build_app
from tests.gateway_fixtures import chat_body, make_config, running_gateway, sim_stats
from tests.servers import ServerThread

NO_CACHE = CacheConfig(is_enabled=False)


@pytest.fixture
def cut_sim() -> Iterator[ServerThread]:
    """An upstream that sends half of every answer, then drops the connection."""
    with ServerThread(build_app(SimConfig(disconnect_rate=1.0))) as server:
        yield server


@pytest.fixture(scope="module")
def good_sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _post(gateway: ServerThread, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30, **kwargs)


@pytest.mark.parametrize("max_retries", [0, 2])
def test_cut_off_answer_is_retried_up_to_max_retries(
    cut_sim: ServerThread, max_retries: int
) -> None:
    retry = RetryConfig(max_retries=max_retries, backoff_base_s=0.01, backoff_max_s=0.05)
    config = make_config({"cut": cut_sim.url + "/v1"}, retry=retry, cache=NO_CACHE)
    with running_gateway(config) as gateway:
        response = _post(gateway, chat_body("cut me"))
    assert response.status_code == 502, response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    stats = sim_stats(cut_sim.url)
    assert stats["num_requests"] == 1 + max_retries
    assert stats["num_disconnects"] == 1 + max_retries


def test_cut_off_answer_fails_over_to_the_next_upstream(
    cut_sim: ServerThread, good_sim: ServerThread
) -> None:
    config = make_config(
        {"cut": cut_sim.url + "/v1", "good": good_sim.url + "/v1"},
        fallbacks=("good",),
        cache=NO_CACHE,
    )
    with running_gateway(config) as gateway:
        response = _post(gateway, chat_body("fail me over"))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]
    assert response.headers["x-hasten-upstream"] == "good"
    assert "cut=" in response.headers["x-hasten-failover"]
    assert sim_stats(cut_sim.url)["num_requests"] == 3  # FAST_RETRY: max_retries = 2

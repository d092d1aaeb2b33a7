"""``[upstreams.X] max_in_flight`` through a running gateway, against the simulator.

Slow answers come from the simulator's own ``x-sim-*`` headers (added in front of it: the
gateway forwards none). Nothing here asserts a duration: requests are known to be in flight
by the gateway's own count (``GET /admin/routing``), and every wait is bounded only against
a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hasten.config import CacheConfig, GatewayConfig, ServerConfig
from hasten.config.hybrid import HybridConfig
from hasten.served import served_config
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

ADMIN_KEY = "in-flight-admin-key"
SLOW = {"x-sim-ttft-ms": "3000"}  # long enough for a third request to meet two in flight
# An answer that would stream for about an hour: it ends only when someone hangs up.
ENDLESS = {"x-sim-ttft-ms": "0", "x-sim-decode-ms": "100", "x-sim-tokens": "30000"}
WAIT_S = 30.0  # a bound against hanging, never an expectation of speed


class WithHeaders:
    """The simulator, with ``headers`` added to every request the gateway sends it."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(k.encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            scope = {**scope, "headers": [*scope["headers"], *self.headers]}
        await self.app(scope, receive, send)


@contextmanager
def simulator(headers: dict[str, str] | None = None) -> Iterator[ServerThread]:
    app = build_app(SimConfig(output_tokens=4))
    with ServerThread(WithHeaders(app, headers) if headers else app) as server:
        yield server


def capped_config(
    upstreams: dict[str, str], *, max_in_flight: int = 2, fallbacks: tuple[str, ...] = ()
) -> GatewayConfig:
    """The first upstream capped at ``max_in_flight``, the others after it as fallbacks."""
    config = make_config(upstreams, fallbacks=fallbacks, cache=CacheConfig(backend="memory"))
    first = next(iter(upstreams))
    capped = replace(config.upstreams[first], max_in_flight=max_in_flight)
    return replace(
        config,
        server=ServerConfig(admin_api_key=ADMIN_KEY),
        upstreams={**config.upstreams, first: capped},
    )


def upstreams_state(gateway: ServerThread) -> dict[str, dict[str, int]]:
    response = httpx.get(
        f"{gateway.url}/admin/routing", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    return response.json()["upstreams"]  # type: ignore[no-any-return]


def in_flight(gateway: ServerThread, name: str) -> int:
    return upstreams_state(gateway).get(name, {}).get("in_flight", 0)


def busy_refusals(gateway: ServerThread) -> dict[str, float]:
    """``hasten_upstream_busy_refusals_total`` by upstream, from ``GET /metrics``."""
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    text = httpx.get(f"{gateway.url}/metrics", headers=headers).raise_for_status().text
    return {
        sample.labels["upstream"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hasten_upstream_busy_refusals_total"
    }


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "waited too long: something hangs"
        time.sleep(0.02)


CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


def ask(
    gateway: ServerThread, path: str, text: str, model: str = "sim-model", **extra: Any
) -> httpx.Response:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 16,
        "temperature": 0,
        **extra,
    }
    return httpx.post(f"{gateway.url}{path}", json=body, timeout=WAIT_S)


@contextmanager
def two_in_flight(
    gateway: ServerThread, path: str, name: str, model: str = "sim-model"
) -> Iterator[list[httpx.Response]]:
    """Two slow requests under way (distinct, so no coalescing); their answers once done."""
    answers: list[httpx.Response] = []

    def send(i: int) -> None:
        answers.append(ask(gateway, path, f"slow {i}", model))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: in_flight(gateway, name) == 2)
        yield answers
    finally:
        for thread in threads:
            thread.join(WAIT_S)


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_the_request_past_max_in_flight_is_a_429_with_retry_after_in_its_apis_shape(
    path: str,
) -> None:
    with simulator(SLOW) as sim, running_gateway(capped_config({"sim": sim.url + "/v1"})) as gw:
        with two_in_flight(gw, path, "sim") as answers:
            refused = ask(gw, path, "one too many")
            assert upstreams_state(gw)["sim"]["in_flight"] == 2
        assert [a.status_code for a in answers] == [200, 200]
        wait_until(lambda: in_flight(gw, "sim") == 0)  # both slots given back
        state = upstreams_state(gw)["sim"]
        num_sent = sim_stats(sim.url)["num_requests"]
        refusals = busy_refusals(gw)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["x-hasten-failover"] == "sim=busy"
    if path == CHAT:  # OpenAI's shape, as hasten's other 429s
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "upstream_busy")
    else:  # Anthropic's: the type it gives an upstream's 429
        assert refused.json()["type"] == "error"
        assert refused.json()["error"]["type"] == "rate_limit_error"
    assert "busy" in refused.text
    assert state == {"in_flight": 0, "max_in_flight": 2, "busy_refusals": 1}
    assert num_sent == 2  # the refused request never reached the upstream
    assert refusals == {"sim": 1.0}


def test_a_route_with_another_deployment_spills_over_to_it() -> None:
    with simulator(SLOW) as sim, simulator() as spill:
        upstreams = {"sim": sim.url + "/v1", "spill": spill.url + "/v1"}
        config = capped_config(upstreams, fallbacks=("spill",))
        with running_gateway(config) as gw:
            with two_in_flight(gw, CHAT, "sim") as answers:
                spilt = ask(gw, CHAT, "one too many")
            wait_until(lambda: in_flight(gw, "sim") == 0)
            state = upstreams_state(gw)
            routing = httpx.get(
                f"{gw.url}/admin/routing", headers={"authorization": f"Bearer {ADMIN_KEY}"}
            ).json()["models"]["*"]["deployments"]["sim"]
    assert [a.headers["x-hasten-upstream"] for a in answers] == ["sim", "sim"]
    assert spilt.status_code == 200 and spilt.json()["choices"][0]["message"]["content"]
    assert spilt.headers["x-hasten-upstream"] == "spill"
    assert spilt.headers["x-hasten-failover"] == "sim=busy"
    assert state["sim"]["busy_refusals"] == 1 and state["spill"]["in_flight"] == 0
    # Not held against the busy upstream: no failure, breaker closed.
    assert (routing["failures"], routing["busy"], routing["breaker"]["state"]) == (0, 1, "closed")


def test_a_busy_local_engine_spills_hybrid_requests_to_the_cloud() -> None:
    # The local engine's upstream as `hasten serve` adds it (max_seqs + max_queue = 2),
    # a slow simulator standing in for llama-server.
    with simulator(SLOW) as engine, simulator() as cloud:
        config = make_config({"cloud": cloud.url + "/v1"}, models=("gpt-cloud",))
        config = replace(
            config,
            server=ServerConfig(admin_api_key=ADMIN_KEY),
            hybrid=HybridConfig(policy="local-first", cloud_model="gpt-cloud"),
        )
        config = served_config(config, local_url=engine.url + "/v1", local_max_in_flight=2)
        with running_gateway(config) as gw:
            with two_in_flight(gw, CHAT, "local", model="auto") as answers:
                spilt = ask(gw, CHAT, "one too many", model="auto")
                refused = ask(gw, CHAT, "no cloud on this route", model="local")
            wait_until(lambda: in_flight(gw, "local") == 0)
    assert [a.headers["x-hasten-upstream"] for a in answers] == ["local", "local"]
    assert spilt.status_code == 200 and spilt.headers["x-hasten-upstream"] == "cloud"
    assert spilt.headers["x-hasten-hybrid"] == "local; reason=easy"  # chosen local, spilt
    assert spilt.headers["x-hasten-failover"] == "local=busy"
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"


@pytest.mark.parametrize("is_cached", [True, False])
def test_a_client_leaving_mid_stream_gives_its_slot_back(is_cached: bool) -> None:
    with simulator(ENDLESS) as sim:
        config = capped_config({"sim": sim.url + "/v1"}, max_in_flight=1)
        if not is_cached:
            config = replace(config, cache=CacheConfig(is_enabled=False))
        with running_gateway(config) as gw:
            body = {
                "model": "sim-model",
                "messages": [{"role": "user", "content": "never ending"}],
                "temperature": 0,
                "stream": True,
            }
            with httpx.stream("POST", f"{gw.url}{CHAT}", json=body, timeout=WAIT_S) as stream:
                lines = stream.iter_lines()
                assert any('"content"' in line for line in lines)  # under way, mid-stream
                assert in_flight(gw, "sim") == 1
            # Hung up: the gateway stops reading, closes upstream and frees the slot.
            wait_until(lambda: in_flight(gw, "sim") == 0)
            wait_until(lambda: sim_stats(sim.url)["num_cancelled"] == 1)
            again = ask(gw, CHAT, "next", max_tokens=2)  # the one slot is free again
    assert again.status_code == 200, again.text

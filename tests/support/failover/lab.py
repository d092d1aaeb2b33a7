"""The loopback lab of a scenario: simulated deployments and a gateway routing over them.

Deployments are simulators (each a ``ServerThread``, its faults set through ``/sim/config``
and ``/sim/burst`` as a user would), a closed port (connection refused) or a ``Blackhole``
(connects time out). The gateway runs in-thread (``running_gateway``) with the settings a
demanding user picks: short connect and first-token timeouts, quick retries, fallbacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from hasten.config import (
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    ServerConfig,
    TimeoutConfig,
    UpstreamConfig,
)
from hasten.config.routing import BreakerConfig, DeploymentConfig, RoutingConfig
from hasten.simulator import SimConfig, build_app
from hasten.simulator.generation import generate_choices
from hasten.simulator.inputs import parse_chat_request
from tests.support.blackhole import Blackhole
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread, free_port

MODEL = "sim-model"
Kind = Literal["sim", "refused", "blackhole"]

DEMANDING_TIMEOUTS = TimeoutConfig(connect_s=0.5, first_byte_s=2.0, idle_s=2.0, total_s=8.0)
DEMANDING_RETRY = RetryConfig(
    max_retries=2, backoff_base_s=0.05, backoff_max_s=0.25, max_retry_after_s=2.0
)
TTFT_TIMEOUT_S = 1.0
DEMANDING_ROUTING = RoutingConfig(
    ttft_timeout_s=TTFT_TIMEOUT_S, breaker=BreakerConfig(cooldown_s=1.0, max_cooldown_s=2.0)
)
# A healthy deployment: an answer of 24 tokens in about 0.26 s.
HEALTHY = SimConfig(ttft_base_ms=20.0, decode_ms_per_token=10.0, output_tokens=24)
CONTROL_TIMEOUT_S = 10.0


# The route field of stream resume, as branch i13-resume names it (``resume_streams`` in TOML).
@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    url: str  # the OpenAI base URL (…/v1)
    kind: Kind

    @property
    def control_url(self) -> str:
        return self.url.removesuffix("/v1")

    def configure(self, **changes: Any) -> None:
        """Changes this simulator's config (its fault rates, its latency)."""
        self._post("/sim/config", changes)

    def burst(self, num_requests: int, status: int = 503) -> None:
        """The next ``num_requests`` requests fail with ``status``; 0 ends a burst."""
        self._post("/sim/burst", {"num_requests": num_requests, "status": status})

    def stats(self) -> dict[str, Any]:
        if self.kind != "sim":
            return {}
        response = httpx.get(self.control_url + "/sim/stats", timeout=CONTROL_TIMEOUT_S)
        stats: dict[str, Any] = response.raise_for_status().json()
        return stats

    def num_requests(self) -> int:
        return int(self.stats().get("num_requests", 0))

    def _post(self, path: str, body: Mapping[str, Any]) -> None:
        assert self.kind == "sim", f"{self.name} is not a simulator"
        httpx.post(self.control_url + path, json=body, timeout=CONTROL_TIMEOUT_S).raise_for_status()


@dataclass(frozen=True, slots=True)
class Lab:
    deployments: tuple[Deployment, ...]
    gateway_url: str
    output_tokens: int

    def __getitem__(self, name: str) -> Deployment:
        return next(d for d in self.deployments if d.name == name)

    def heal(self) -> None:
        """Every simulator back to healthy: no fault rates, no burst."""
        for deployment in self.deployments:
            if deployment.kind == "sim":
                deployment.configure(**_healthy_changes())
                deployment.burst(0)

    def num_upstream_calls(self) -> int:
        return sum(d.num_requests() for d in self.deployments)


def _healthy_changes() -> dict[str, Any]:
    data = HEALTHY.to_dict()
    del data["models"]
    return data


def gateway_config(
    deployments: Sequence[Deployment],
    *,
    is_tiered: bool = True,
    is_stream_upstream: bool = True,
    routing: RoutingConfig = DEMANDING_ROUTING,
) -> GatewayConfig:
    """One model over ``deployments``: fallbacks in order (``is_tiered``), or one tier."""
    upstreams = {
        d.name: UpstreamConfig(
            name=d.name,
            url=d.url,
            timeouts=DEMANDING_TIMEOUTS,
            retry=DEMANDING_RETRY,
            is_stream_upstream=is_stream_upstream,
            # The simulator continues an assistant prefix as vLLM does: a demanding user
            # names the mechanism, so a cut non-deterministic stream can go on.
            prefill="continue_final_message" if d.kind == "sim" else "none",
        )
        for d in deployments
    }
    tiers = [
        DeploymentConfig(upstream=d.name, priority=index if is_tiered else 0)
        for index, d in enumerate(deployments)
    ]
    route = ModelRoute(
        name=MODEL,
        upstream=deployments[0].name,
        fallbacks=tuple(d.name for d in deployments[1:]),
        routing=replace(routing, deployments=tuple(tiers)),
    )
    return GatewayConfig(
        server=ServerConfig(),
        upstreams=upstreams,
        models={MODEL: with_stream_resume(route)},
        cache=CacheConfig(backend="memory"),
    )


def with_stream_resume(route: ModelRoute) -> ModelRoute:
    """The route with stream resume on (off by default), as a demanding user would set it."""
    return replace(route, is_resuming_streams=True)


@contextlib.contextmanager
def lab(
    kinds: Sequence[Kind],
    *,
    sim: SimConfig = HEALTHY,
    is_tiered: bool = True,
    is_stream_upstream: bool = True,
    routing: RoutingConfig = DEMANDING_ROUTING,
) -> Iterator[Lab]:
    """Deployments ``a``, ``b``, ``c``… of the given kinds, and a gateway over them."""
    with contextlib.ExitStack() as stack:
        deployments = []
        for index, kind in enumerate(kinds):
            name = "abcdefgh"[index]
            deployments.append(Deployment(name, _start(stack, kind, sim), kind))
        config = gateway_config(
            deployments,
            is_tiered=is_tiered,
            is_stream_upstream=is_stream_upstream,
            routing=routing,
        )
        gateway = stack.enter_context(running_gateway(config))
        yield Lab(tuple(deployments), gateway.url, sim.output_tokens)


def _start(stack: contextlib.ExitStack, kind: Kind, sim: SimConfig) -> str:
    if kind == "sim":
        return stack.enter_context(ServerThread(build_app(sim))).url + "/v1"
    if kind == "blackhole":
        return stack.enter_context(Blackhole()).url + "/v1"
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: refused


def chat(question: str, *, is_stream: bool = True, temperature: float = 0.0) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": question}],
        "temperature": temperature,
        "stream": is_stream,
    }


def answer_text(body: Mapping[str, Any], output_tokens: int) -> str:
    """What every simulator answers to ``body``: the text is a function of the request."""
    choice = generate_choices(parse_chat_request(dict(body)), output_tokens, None)[0]
    return str(choice.text)

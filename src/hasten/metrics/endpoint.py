"""``GET /metrics``: who may scrape, the engine's numbers, and the exposition format.

With an admin key configured, the gateway port's ``/metrics`` takes it as a bearer token
(how Prometheus' ``authorization`` scrape setting sends it); with tenant keys but no admin
key it is refused (a tenant key must not see every tenant's traffic); with neither it is
open, like ``/stats``. The separate metrics port (``[metrics] port``) asks for no key and
binds loopback unless told otherwise. The format follows the ``Accept`` header: OpenMetrics
when the scraper asks for ``application/openmetrics-text``, the text format otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from prometheus_client.exposition import choose_encoder

from hasten.auth import Authenticator
from hasten.errors import (
    AdminDisabled,
    Forbidden,
    HastenError,
    MethodNotAllowed,
    NotFound,
    Unauthorized,
)
from hasten.metrics.collector import EngineSample, GatewayCollector
from hasten.metrics.registry import Metrics
from hasten.upstream.transport import Transport, UpstreamRequest
from hasten.values.outcome import OBSERVED_SCOPE_KEY
from hasten.wire.asgi import (
    Receive,
    Scope,
    Send,
    accept_lifespan,
    header,
    send_error,
    send_response,
)

if TYPE_CHECKING:
    from hasten.proxy.pipeline import Pipeline

__all__ = ["OBSERVED_SCOPE_KEY", "MetricsApp", "build_metrics", "render", "serve_metrics"]

_log = logging.getLogger("hasten.metrics")
ENGINE_SCRAPE_TIMEOUT_S = 0.5  # a scrape must not hang on a stuck child


@runtime_checkable
class EngineChild(Protocol):
    """The local engine's supervisor, as a scrape sees it (``local/supervisor.py``)."""

    url: str  # the child's OpenAI base URL, ``http://127.0.0.1:<port>/v1``

    def status(self) -> dict[str, object]: ...


class Scrape:
    """What a scrape fetches before collecting: the engine child's numbers, if there is one."""

    def __init__(self, collector: GatewayCollector, transport: Transport, engine: object) -> None:
        self.collector, self._transport = collector, transport
        self._engine = engine if isinstance(engine, EngineChild) else None

    @property
    def engine(self) -> EngineSample | None:
        return self.collector.engine

    async def sample_engine(self) -> None:
        engine = self._engine
        if engine is None:
            return
        status = engine.status()
        state = str(status.get("state", ""))
        restarts = status.get("restarts", 0)
        stats: dict[str, object] = {}
        if state == "ready":
            stats = await self._engine_stats(engine.url.removesuffix("/v1") + "/metrics")
        self.collector.engine = EngineSample(
            state, restarts if isinstance(restarts, int) else 0, stats
        )

    async def _engine_stats(self, url: str) -> dict[str, object]:
        timeout_s = ENGINE_SCRAPE_TIMEOUT_S
        headers = {"accept": "text/plain"}
        request = UpstreamRequest("GET", url, headers, None, timeout_s, timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._transport.send(request)
                try:
                    body = await response.read(timeout_s)
                finally:
                    response.close()
        except (HastenError, TimeoutError) as exc:
            _log.info("engine stats not scraped: %s", exc)
            return {}
        return dict(engine_stats(body.decode(errors="replace")))


# llama-server's own /metrics (Prometheus text) -> the names hasten's engine gauges read.
ENGINE_METRICS = {
    "llamacpp:requests_processing": "num_running",
    "llamacpp:requests_deferred": "num_waiting",
    "llamacpp:tokens_predicted_total": "num_decoded_tokens",
    "llamacpp:n_decode_total": "num_steps",
    "llamacpp:prompt_tokens_cached_total": "num_cached_prompt_tokens",
}


def engine_stats(text: str) -> dict[str, int]:
    """The engine's counters from its Prometheus text; lines it cannot read are skipped."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        key = ENGINE_METRICS.get(name)
        if key is None:
            continue
        try:
            stats[key] = int(float(value.split(" ", 1)[0]))
        except ValueError:
            continue
    return stats


def build_metrics(pipeline: Pipeline, transport: Transport, engine: object) -> Metrics:
    """The metrics of the gateway's request path, with its scrape-time collector registered."""
    is_tenant_label = pipeline.config.metrics.is_tenant_label
    metrics = Metrics(pipeline.client, is_tenant_label=is_tenant_label)
    collector = GatewayCollector(pipeline, metrics)
    metrics.registry.register(collector)
    metrics.scrape = Scrape(collector, transport, engine)
    return metrics


async def check_access(auth: Authenticator, scope: Scope) -> None:
    """Raises unless this caller may scrape the gateway port's ``/metrics``."""
    if auth.has_admin_key:
        caller = await auth.resolve(header(scope, b"authorization"))  # 401 for a bad key
        if caller.is_admin:
            return
        if auth.is_enforcing:
            raise Forbidden("/metrics needs the admin key; a tenant key cannot use it")
        raise Unauthorized("/metrics needs the admin key: send 'Authorization: Bearer <admin key>'")
    if auth.is_enforcing:
        raise AdminDisabled(
            "/metrics needs the admin key, and none is configured: set one, or serve the "
            "metrics on their own port ([metrics] port)"
        )


async def render(metrics: Metrics, accept: bytes | None) -> tuple[bytes, str]:
    """The exposition (OpenMetrics or text, as ``accept`` asks) and its content type."""
    scrape = metrics.scrape
    if scrape is not None:
        await scrape.sample_engine()
    encoder, content_type = choose_encoder((accept or b"").decode("latin-1"))
    return encoder(metrics.registry), content_type


async def serve_metrics(
    metrics: Metrics, scope: Scope, send: Send, auth: Authenticator | None
) -> None:
    """``GET /metrics``; ``auth`` None on the separate metrics port."""
    method = scope["method"]
    if method not in ("GET", "HEAD"):
        raise MethodNotAllowed(f"{method} is not allowed on /metrics; use GET", allow="GET, HEAD")
    if auth is not None:
        await check_access(auth, scope)
    body, content_type = await render(metrics, header(scope, b"accept"))
    await send_response(send, 200, body, [(b"content-type", content_type.encode())])


class Metered(Protocol):
    """What the metrics port reads of the gateway: its metrics, if on."""

    @property
    def metrics(self) -> Metrics | None: ...


class GatewaySource(Protocol):
    """The gateway app, as the metrics port reaches its ``Gateway``."""

    async def startup(self) -> Metered: ...


class MetricsApp:
    """The separate metrics port: ``GET /metrics`` of the gateway, no key, nothing else."""

    def __init__(self, source: GatewaySource) -> None:
        self._source = source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # Nothing to start: the gateway app's own lifespan builds what this port serves.
            await accept_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        gateway = await self._source.startup()
        try:
            if scope["path"] != "/metrics" or gateway.metrics is None:
                raise NotFound(f"Unknown path {scope['path']}", code="unknown_url")
            await serve_metrics(gateway.metrics, scope, send, None)
        except HastenError as exc:
            await send_error(send, exc)

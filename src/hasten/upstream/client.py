"""Upstream calls: pick a deployment, hedge and fail over, then hand the winner to the proxy.

Retries, hedges and failovers happen only while opening the call, i.e. before any byte has
reached the client; once a response is flowing it is forwarded or ended with an error, never
replayed. The deciding is ``hasten.routing`` (one ``DeploymentPool`` per model route, kept
here for the life of the process); the doing is ``hasten.upstream.dispatch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hasten.config import WILDCARD_MODEL, GatewayConfig, ModelRoute, UpstreamConfig
from hasten.errors import HastenError, UpstreamTimeout
from hasten.routing.affinity import prefix_key
from hasten.routing.pool import DeploymentPool
from hasten.routing.settings import DeploymentConfig, RoutingConfig
from hasten.upstream.attempt import BufferedResponse
from hasten.upstream.dispatch import Decision, Dispatch, GaveUp, RouteRequest
from hasten.upstream.transport import Transport, UpstreamRequest, UpstreamResponse

__all__ = ["BufferedResponse", "RouteRequest", "UpstreamCall", "UpstreamClient"]

_log = logging.getLogger("hasten.upstream")
PROBE_PATH = "/models"
PROBE_TIMEOUT_S = 5.0


class _TrackedResponse:
    """The winner's response; closing it (the proxy always does) ends its in-flight count."""

    __slots__ = ("_on_close", "_response", "headers", "status")

    def __init__(self, response: UpstreamResponse, on_close: Callable[[], None]) -> None:
        self._response, self._on_close = response, on_close
        self.status, self.headers = response.status, response.headers

    def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        return self._response.iter_chunks(idle_timeout_s)

    async def read(self, timeout_s: float) -> bytes:
        return await self._response.read(timeout_s)

    def close(self) -> None:
        self._response.close()
        on_close, self._on_close = self._on_close, _nothing
        on_close()


def _nothing() -> None:
    return None


class _StreamReport:
    """Counts the winner's SSE events to learn its time per output token, and its fate."""

    __slots__ = ("_first_token_s", "_name", "_num_events", "_pool")

    def __init__(self, pool: DeploymentPool, name: str) -> None:
        self._pool, self._name = pool, name
        self._first_token_s = time.monotonic()
        self._num_events = 0

    def feed(self, chunk: bytes) -> None:
        self._num_events += chunk.count(b"data:")

    def finish(self, error: str = "") -> None:
        now_s = time.monotonic()
        tpot_ms = None
        if not error and self._num_events > 2:
            tpot_ms = (now_s - self._first_token_s) * 1000.0 / (self._num_events - 1)
        self._pool.on_stream_end(self._name, now_s, tpot_ms=tpot_ms, error=error)


@dataclass(slots=True)
class UpstreamCall:
    """An open upstream response plus what it took to get it."""

    response: UpstreamResponse
    upstream: UpstreamConfig
    ttfb_ms: float
    deadline_s: float
    num_attempts: int
    head: list[bytes] = field(default_factory=list)  # read while waiting for the first token
    rest: AsyncIterator[bytes] | None = None
    decision: Decision | None = None
    report: _StreamReport | None = None

    @property
    def remaining_s(self) -> float:
        return self.deadline_s - time.monotonic()

    @property
    def headers(self) -> Mapping[str, str]:
        """The upstream's headers plus the router's ``x-hasten-*`` account of the call."""
        if self.decision is None:
            return self.response.headers
        return {**self.response.headers, **self.decision.headers()}

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive, bounded by the idle gap and the total deadline."""
        idle_s = self.upstream.timeouts.idle_s
        report = self.report
        try:
            async with asyncio.timeout_at(_loop_time(self.deadline_s)):
                for chunk in self.head:
                    yield chunk
                source = self.rest or self.response.iter_chunks(idle_s)
                async for chunk in source:
                    if report is not None:
                        report.feed(chunk)
                    yield chunk
        except TimeoutError:
            error = UpstreamTimeout(
                f"upstream response exceeded the total timeout of "
                f"{self.upstream.timeouts.total_s:g} s",
                code="upstream_total_timeout",
            )
            if report is not None:
                report.finish(error.code or "timeout")
            raise error from None
        except HastenError as exc:
            if report is not None:
                report.finish(exc.code or "stream_error")
            raise
        if report is not None:
            report.finish()

    async def read(self) -> bytes:
        body = await self.response.read(max(0.001, self.remaining_s))
        return b"".join(self.head) + body if self.head else body


def _loop_time(monotonic_deadline_s: float) -> float:
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline_s - time.monotonic())


def route_deployments(route: ModelRoute) -> tuple[DeploymentConfig, ...]:
    """A route's deployments; ``upstream`` + ``fallbacks`` become one priority tier each."""
    if route.routing.deployments:
        return route.routing.deployments
    names = (route.upstream, *route.fallbacks)
    return tuple(DeploymentConfig(upstream=name, priority=i) for i, name in enumerate(names))


class UpstreamClient:
    """Opens upstream calls; keeps one routing pool (estimates, breakers) per model route."""

    def __init__(
        self,
        transport: Transport,
        *,
        rng: random.Random | None = None,
        config: GatewayConfig | None = None,
    ) -> None:
        self._transport = transport
        self._rng = rng or random.Random()
        self._config = config
        self._pools: dict[str, DeploymentPool] = {}
        self._probes: list[asyncio.Task[None]] = []

    async def aclose(self) -> None:
        for task in self._probes:
            task.cancel()
        for task in self._probes:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._probes.clear()
        await self._transport.aclose()

    def route_request(
        self,
        model: str,
        body: Mapping[str, Any],
        *,
        is_stream: bool,
        is_idempotent: bool = True,
    ) -> RouteRequest:
        """What the router needs from a parsed client request (affinity key, length hint)."""
        route = self._route(model)
        routing = route.routing if route is not None else RoutingConfig()
        key = None
        if routing.is_affinity_enabled:
            key = prefix_key(
                body,
                min_chars=routing.affinity_min_prefix_chars,
                max_chars=routing.affinity_max_prefix_chars,
            )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        expected_tokens = max_tokens if isinstance(max_tokens, int) else 0
        return RouteRequest(model, is_stream, key, expected_tokens, is_idempotent)

    async def open(
        self,
        targets: Sequence[UpstreamConfig],
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        route: RouteRequest | None = None,
    ) -> UpstreamCall:
        """Returns the first usable response; raises the last error when none is.

        A non-retryable response (2xx, or a 4xx such as 400) is returned at once. When
        every upstream keeps failing with retryable statuses, the last one is returned so
        the client sees the upstream's own error.
        """
        pool, upstreams = self._pool(targets, route)
        request = route or RouteRequest(model="")
        dispatch = Dispatch(
            self._transport,
            pool,
            upstreams,
            request,
            path=path,
            body=body,
            headers=headers,
            rng=self._rng,
        )
        try:
            won = await dispatch.run()
        except GaveUp as gave_up:
            return UpstreamCall(
                gave_up.buffered,
                upstreams[gave_up.name],
                0.0,
                dispatch.deadline_s,
                dispatch.num_attempts,
                decision=gave_up.decision if route is not None else None,
            )
        name, ready = won.name, won.ready
        is_stream = route is not None and route.is_stream and ready.response.status == 200
        return UpstreamCall(
            _TrackedResponse(ready.response, lambda: pool.on_attempt_end(name)),
            upstreams[name],
            won.elapsed_ms,
            dispatch.deadline_s,
            dispatch.num_attempts,
            head=ready.head,
            rest=ready.rest,
            decision=dispatch.decision if route is not None else None,
            report=_StreamReport(pool, name) if is_stream else None,
        )

    def _route(self, model: str) -> ModelRoute | None:
        if self._config is None:
            return None
        models = self._config.models
        return models.get(model) or models.get(WILDCARD_MODEL)

    def _pool(
        self, targets: Sequence[UpstreamConfig], route: RouteRequest | None
    ) -> tuple[DeploymentPool, Mapping[str, UpstreamConfig]]:
        model_route = self._route(route.model) if route is not None else None
        if model_route is None or self._config is None:
            # Unrouted calls (listing models) or a bare client: the targets in order, no memory.
            tiers = [DeploymentConfig(upstream=t.name, priority=i) for i, t in enumerate(targets)]
            return DeploymentPool(tiers, RoutingConfig(), self._rng), {t.name: t for t in targets}
        existing = self._pools.get(model_route.name)
        if existing is not None:
            return existing, self._config.upstreams
        pool = DeploymentPool(route_deployments(model_route), model_route.routing, self._rng)
        self._pools[model_route.name] = pool
        if model_route.routing.probe_interval_s > 0:
            self._start_probes(pool, self._config.upstreams, model_route.routing)
        return pool, self._config.upstreams

    def routing_state(self) -> dict[str, object]:
        """Every model's pool as JSON-ready data, for ``GET /admin/routing``."""
        now_s = time.monotonic()
        return {name: pool.snapshot(now_s) for name, pool in self._pools.items()}

    def _start_probes(
        self, pool: DeploymentPool, upstreams: Mapping[str, UpstreamConfig], routing: RoutingConfig
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self._probe_loop(pool, upstreams, routing.probe_interval_s)
        )
        self._probes.append(task)

    async def _probe_loop(
        self, pool: DeploymentPool, upstreams: Mapping[str, UpstreamConfig], interval_s: float
    ) -> None:
        """Measures the round trip to each deployment, so the nearest one is preferred."""
        while True:
            for name in list(pool.deployments):
                rtt_ms, error = await self._probe(upstreams[name])
                pool.on_probe(name, time.monotonic(), rtt_ms, error)
            await asyncio.sleep(interval_s)

    async def _probe(self, upstream: UpstreamConfig) -> tuple[float | None, str]:
        headers = {"accept": "application/json"}
        if upstream.api_key:
            headers["authorization"] = f"Bearer {upstream.api_key}"
        request = UpstreamRequest(
            "GET", upstream.url + PROBE_PATH, headers, None, PROBE_TIMEOUT_S, PROBE_TIMEOUT_S
        )
        started_s = time.perf_counter()
        try:
            response = await self._transport.send(request)
        except HastenError as exc:
            return None, exc.code or "unreachable"
        rtt_ms = (time.perf_counter() - started_s) * 1000.0
        response.close()
        return rtt_ms, ""

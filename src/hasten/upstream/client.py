"""Upstream calls: pick a deployment, hedge and fail over, then hand the winner to the proxy.

Retries, hedges and failovers happen only while opening the call, i.e. before any byte has
reached the client; once a response is flowing it is forwarded or ended with an error, never
replayed. The deciding is ``hasten.routing`` (one ``DeploymentPool`` per model route, kept
here for the life of the process); the doing is ``hasten.upstream.dispatch``. The route comes
resolved from the proxy (``hasten.routing.models``); nothing here looks a model up again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from hasten.apis.api import Api
from hasten.apis.chat import CHAT_API
from hasten.config import UpstreamConfig
from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.errors import HastenError, UpstreamTimeout
from hasten.routing.affinity import prefix_key
from hasten.routing.gate import UpstreamGates
from hasten.routing.models import ResolvedModel, Route
from hasten.routing.pool import DeploymentPool
from hasten.upstream.bounded import (
    EVENT_COST_BYTES,
    MAX_ERROR_BODY_BYTES,
    AnswerBytes,
    read_bounded,
    too_large,
)
from hasten.upstream.bridge import Bridging, NativeOnly
from hasten.upstream.dispatch import Dispatch, GaveUp, RequestTraits, Won
from hasten.upstream.integrity import EventSink, StreamGuard, is_event_stream
from hasten.upstream.transport import Transport, UpstreamRequest, UpstreamResponse
from hasten.values.stage import NO_STAGE, Stage

__all__ = ["TOTAL_TIMEOUT_CODE", "UpstreamCall", "UpstreamClient", "request_traits"]

_log = logging.getLogger("hasten.upstream")
PROBE_PATH = "/models"
PROBE_TIMEOUT_S = 5.0
TOTAL_TIMEOUT_CODE = "upstream_total_timeout"  # a response that ran out of its total time


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


def _nothing() -> None:
    return None


def _ignored(reason: str) -> None:
    return None


class _Nothing:
    """An async iterator that ends at once."""

    def __aiter__(self) -> _Nothing:
        return self

    async def __anext__(self) -> bytes:
        raise StopAsyncIteration


_NOTHING = _Nothing()


class UpstreamCall:
    """An open upstream answer, all the proxy reads: status and headers, then the body once
    (``read`` or ``iter_chunks``), then ``close``, which always comes and ends the call's
    in-flight count."""

    __slots__ = (
        "_deadline_s",
        "_head",
        "_is_stream",
        "_on_close",
        "_on_failure",
        "_report",
        "_response",
        "_rest",
        "headers",
        "status",
        "ttfb_ms",
        "upstream",
    )

    def __init__(
        self,
        response: UpstreamResponse,
        upstream: UpstreamConfig,
        *,
        headers: Mapping[str, str],
        ttfb_ms: float,
        deadline_s: float,
        head: Sequence[bytes] = (),
        rest: AsyncIterator[bytes] | None = None,
        on_close: Callable[[], None] = _nothing,
        report: _StreamReport | None = None,
        is_stream: bool = False,
        on_failure: Callable[[str], None] = _ignored,
    ) -> None:
        self._response, self.upstream = response, upstream
        self._is_stream = is_stream  # asked as a stream: its answer is checked as one
        self.status = response.status
        self.headers = headers  # the upstream's, plus the router's ``x-hasten-*`` account
        self.ttfb_ms, self._deadline_s = ttfb_ms, deadline_s
        self._head, self._rest = head, rest  # what the first-token wait already read
        self._on_close, self._report = on_close, report
        self._on_failure = on_failure  # a body that failed to arrive, told to the pool

    async def iter_chunks(self, sink: EventSink | None = None) -> AsyncIterator[bytes]:
        """Body chunks as they arrive, bounded by the idle gap, the total deadline and the
        upstream's ``max_answer_bytes``; an event stream's cut at event ends and checked
        (``hasten.upstream.integrity``), its events handed to ``sink`` as they are checked
        (none when the answer is no stream)."""
        report = self._report
        # What the client asked for decides how the answer is checked: a stream request's
        # answer is checked as a stream whatever content type the upstream claims.
        is_guarded = self.status == 200 and (self._is_stream or is_event_stream(self.headers))
        guard = StreamGuard(sink) if is_guarded else None
        max_bytes = self.upstream.max_answer_bytes
        if self.status != 200:  # an error's body, passed on: no answer is that long
            max_bytes = min(max_bytes, MAX_ERROR_BODY_BYTES)
        count = AnswerBytes(max_bytes)
        try:
            async with asyncio.timeout_at(_loop_time(self._deadline_s)):
                for chunk in self._head:
                    count.add(len(chunk))
                    if guard is not None:
                        num_events = guard.num_events
                        chunk = guard.feed(chunk)
                        count.add(EVENT_COST_BYTES * (guard.num_events - num_events))
                    if chunk:
                        yield chunk
                source = self._rest or self._response.iter_chunks(self.upstream.timeouts.idle_s)
                # Events after [DONE] end the reading: the answer is over, the rest unread.
                is_over = guard is not None and guard.has_extra
                async for chunk in _NOTHING if is_over else source:
                    count.add(len(chunk))
                    if report is not None:
                        report.feed(chunk)
                    if guard is not None:
                        num_events = guard.num_events
                        chunk = guard.feed(chunk)
                        count.add(EVENT_COST_BYTES * (guard.num_events - num_events))
                        if guard.has_extra:
                            if chunk:
                                yield chunk
                            break
                    if chunk:
                        yield chunk
                if guard is not None and (tail := guard.finish()):
                    yield tail
        except TimeoutError:
            if report is not None:
                report.finish(TOTAL_TIMEOUT_CODE)
            else:
                self._on_failure(TOTAL_TIMEOUT_CODE)
            # Not bound to a name here: this frame, held by the TimeoutError's traceback
            # (the new error's context), would hold the new error too, a cycle.
            raise UpstreamTimeout(
                f"upstream response exceeded the total timeout of "
                f"{self.upstream.timeouts.total_s:g} s",
                code=TOTAL_TIMEOUT_CODE,
            ) from None
        except HastenError as exc:
            if report is not None:
                report.finish(exc.code or "stream_error")
            else:
                self._on_failure(exc.code or "body_error")
            raise
        if report is not None:
            report.finish()

    async def read(self) -> bytes:
        """The whole body, within the total deadline and ``max_answer_bytes`` (an error
        status's within ``MAX_ERROR_BODY_BYTES``)."""
        max_bytes = self.upstream.max_answer_bytes
        if self.status != 200:
            max_bytes = min(max_bytes, MAX_ERROR_BODY_BYTES)
        num_head_bytes = sum(len(chunk) for chunk in self._head)
        rest = self._rest or self._response.iter_chunks(self.upstream.timeouts.idle_s)
        try:
            if num_head_bytes > max_bytes:
                raise too_large(max_bytes)
            body = await read_bounded(
                rest,
                timeout_s=self._deadline_s - time.monotonic(),
                max_bytes=max_bytes - num_head_bytes,
            )
        except HastenError as exc:
            self._on_failure(exc.code or "body_error")  # counted as a broken answer
            raise
        return b"".join(self._head) + body if self._head else body

    def close(self) -> None:
        self._response.close()
        on_close, self._on_close = self._on_close, _nothing
        on_close()


def _loop_time(monotonic_deadline_s: float) -> float:
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline_s - time.monotonic())


def request_traits(
    body: Mapping[str, Any], routing: RoutingConfig, *, is_stream: bool, is_idempotent: bool
) -> RequestTraits:
    """What the router needs from a parsed client request (affinity key, length hint)."""
    key = None
    if routing.is_affinity_enabled:
        key = prefix_key(
            body,
            min_chars=routing.affinity_min_prefix_chars,
            max_chars=routing.affinity_max_prefix_chars,
        )
    max_tokens = (
        body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    )
    expected_tokens = max_tokens if isinstance(max_tokens, int) else 0
    return RequestTraits(is_stream, key, expected_tokens, is_idempotent)


class UpstreamClient:
    """Opens upstream calls; keeps one routing pool (estimates, breakers) per model route."""

    def __init__(self, transport: Transport, *, rng: random.Random | None = None) -> None:
        self._transport = transport
        self._rng = rng or random.Random()
        self._pools: dict[str, DeploymentPool] = {}
        # One in-flight gate per upstream for every route (``max_in_flight``).
        self.gates = UpstreamGates()
        self._probes: list[asyncio.Task[None]] = []

    async def aclose(self) -> None:
        for task in self._probes:
            task.cancel()
        for task in self._probes:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._probes.clear()
        await self._transport.aclose()

    async def open(
        self,
        model: ResolvedModel,
        request: Bridging,
        api: Api,
        *,
        parsed: Mapping[str, Any],
        is_stream: bool,
        is_idempotent: bool = True,
        trace: Stage = NO_STAGE,
        excluded: frozenset[str] = frozenset(),
    ) -> UpstreamCall:
        """The first usable answer from ``model``'s route; raises when there is none.

        ``request`` gives each attempt its leg (the client's request, or its translation
        for a deployment that speaks another API: ``hasten.upstream.bridge``) and ``api``
        how its answer reads; ``parsed`` (the client's request as ``Api.affinity_view``
        reads it) gives the router its prefix-affinity key and length hint; ``trace`` is the
        request's span, under which every attempt gets its own (and its own
        ``traceparent`` upstream); ``excluded``
        deployments are left out of the ranking (a resumed stream). A non-retryable
        response (2xx, or a 4xx such as 400) is returned at once. When every deployment
        keeps failing with retryable statuses, the last one is returned, so the client sees
        the upstream's own error.
        """
        route = model.route
        pool = self._pool(route)
        traits = request_traits(
            parsed, route.routing, is_stream=is_stream, is_idempotent=is_idempotent
        )
        dispatch = Dispatch(
            self._transport,
            pool,
            route.upstreams,
            traits,
            legs=request,
            api=api,
            rng=self._rng,
            trace=trace,
            excluded=excluded,
            gates=self.gates,
        )
        return _call(await dispatch.run(), pool, route.upstreams, is_stream, is_routed=True)

    async def get(
        self, upstream: UpstreamConfig, path: str, headers: Mapping[str, str]
    ) -> UpstreamCall:
        """A GET outside any model route (listing models): retried, never remembered, and
        not under the upstream's ``max_in_flight`` (it takes no generation slot)."""
        deployment = DeploymentConfig(upstream=upstream.name)
        pool = DeploymentPool([deployment], RoutingConfig(), self._rng)
        upstreams = {upstream.name: upstream}
        dispatch = Dispatch(
            self._transport,
            pool,
            upstreams,
            RequestTraits(),
            legs=NativeOnly(path, b"", headers),
            api=CHAT_API,
            rng=self._rng,
        )
        return _call(await dispatch.run(), pool, upstreams, False, is_routed=False)

    def _pool(self, route: Route) -> DeploymentPool:
        existing = self._pools.get(route.name)
        if existing is not None:
            return existing
        pool = DeploymentPool(route.deployments, route.routing, self._rng)
        self._pools[route.name] = pool
        if route.routing.probe_interval_s > 0:
            self._start_probes(pool, route.upstreams, route.routing)
        return pool

    def pool_for(self, route: Route) -> DeploymentPool:
        """Route ``route``'s pool, created now if no request has gone there yet (the fleet's
        routing sync creates every pool at startup, so none misses a trip published before)."""
        return self._pool(route)

    def existing_pool(self, name: str) -> DeploymentPool | None:
        """The pool of route ``name`` if a request has gone there yet; never creates one."""
        return self._pools.get(name)

    def pools(self) -> dict[str, DeploymentPool]:
        """Every route's pool so far, by route name (a copy: for a metrics scrape)."""
        return dict(self._pools)

    def routing_state(self) -> dict[str, object]:
        """Every model's pool as JSON-ready data, for ``GET /admin/routing``."""
        now_s = time.monotonic()
        return {name: pool.snapshot(now_s) for name, pool in self._pools.items()}

    def upstreams_state(self) -> dict[str, dict[str, int]]:
        """Every upstream's in-flight gate so far (count, cap, busy refusals), by name."""
        return self.gates.snapshot()

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


def _call(
    outcome: Won | GaveUp,
    pool: DeploymentPool,
    upstreams: Mapping[str, UpstreamConfig],
    is_stream: bool,
    *,
    is_routed: bool,
) -> UpstreamCall:
    """The one value the proxy reads, from how the dispatch ended."""
    if isinstance(outcome, Won):
        name, response = outcome.name, outcome.ready.response
        is_reported = is_stream and response.status == 200
        return UpstreamCall(
            response,
            upstreams[name],
            headers=_with_routing(response.headers, outcome.headers, is_routed),
            ttfb_ms=outcome.elapsed_ms,
            deadline_s=outcome.deadline_s,
            head=outcome.ready.head,
            rest=outcome.ready.rest,
            on_close=_ender(pool, name, outcome.span),
            report=_StreamReport(pool, name) if is_reported else None,
            is_stream=is_stream,
            on_failure=lambda reason: pool.on_stream_end(
                name, time.monotonic(), tpot_ms=None, error=reason
            ),
        )
    last = outcome.last
    if isinstance(last, HastenError):
        last.headers.update(outcome.headers)
        raise last
    return UpstreamCall(
        last,
        upstreams[outcome.name],
        headers=_with_routing(last.headers, outcome.headers, is_routed),
        ttfb_ms=0.0,
        deadline_s=outcome.deadline_s,
        is_stream=is_stream,
    )


def _ender(pool: DeploymentPool, name: str, span: Stage) -> Callable[[], None]:
    """What closing the winner's response does: ends its in-flight count and its span."""
    if span is NO_STAGE:
        return lambda: pool.on_attempt_end(name)

    def end() -> None:
        pool.on_attempt_end(name)
        span.end()

    return end


def _with_routing(
    upstream: Mapping[str, str], routing: Mapping[str, str], is_routed: bool
) -> Mapping[str, str]:
    return {**upstream, **routing} if is_routed else upstream

"""The gateway as a pure ASGI application: routing, lifecycle and the one error renderer."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from hasten import dashboard
from hasten.admin import cache as admin
from hasten.admin import keys as key_endpoints
from hasten.apis.api import Api
from hasten.apis.known import APIS, MESSAGES_API
from hasten.auth import Authenticator
from hasten.cache import TieredCache, build_cache
from hasten.config import GatewayConfig
from hasten.dashboard.data import EngineStatus
from hasten.dashboard.window import RollingWindow
from hasten.errors import ClientGone, HastenError, MethodNotAllowed, NotFound
from hasten.fleet.coalesce import FleetCoalescer
from hasten.fleet.link import FleetLink
from hasten.fleet.routing import RoutingSync
from hasten.gateway import Gateway
from hasten.keys.factory import build_key_directory
from hasten.limits.limiter import Limiter
from hasten.metrics.endpoint import OBSERVED_SCOPE_KEY, build_metrics, serve_metrics
from hasten.openapi import openapi_json
from hasten.policy import POLICY_HEADER, PolicyBook
from hasten.proxy.count import count_tokens
from hasten.proxy.handle import API_SCOPE_KEY, MODEL_SCOPE_KEY, TENANT_SCOPE_KEY, handle
from hasten.proxy.pipeline import Pipeline
from hasten.proxy.stats import Stats
from hasten.responses import endpoints as response_endpoints
from hasten.responses.factory import build_response_state
from hasten.routing.models import ModelRouter
from hasten.served import served_config
from hasten.server.heap import freeze_startup_heap
from hasten.telemetry.tracing import Tracing
from hasten.upstream.client import UpstreamClient
from hasten.upstream.lean import LeanTransport
from hasten.upstream.transport import AiohttpTransport, Transport
from hasten.values.caller import Caller, visible_models
from hasten.wire.asgi import Message, Receive, Scope, Send, header, send_error, send_json

if TYPE_CHECKING:
    from hasten.semantic.tier import SemanticTier

_log = logging.getLogger("hasten")
_access_log = logging.getLogger("hasten.access")


class Peers(Protocol):
    """The other gateway processes sharing this one's L2 (``hasten serve --workers``)."""

    def attach(self, cache: TieredCache) -> None: ...

    def close(self) -> None: ...


MODELS_TIMEOUT_S = 5.0

# Both "/v1/x" and "/x": clients differ in whether their base URL ends with /v1 (the
# Anthropic SDK's never does).
_ENDPOINTS: dict[str, Api] = {
    prefix + api.path: api for api in APIS.values() for prefix in ("/v1", "")
}
_COUNT_TOKENS_PATHS = frozenset({"/v1/messages/count_tokens", "/messages/count_tokens"})
_GET_PATHS = frozenset({"/healthz", "/readyz", "/v1/models", "/models", "/stats", "/openapi.json"})


class HastenApp:
    """ASGI entry point. Components are built at startup, never at import."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        transport: Transport | None = None,
        engine: EngineStatus | None = None,
        peers: Peers | None = None,
        worker_index: int | None = None,
        tracing: Tracing | None = None,
        is_heap_frozen: bool = False,
    ) -> None:
        # Any parsed config can be served: the app adds what needs no process (hybrid routes).
        self.config = served_config(config)
        self._transport = transport
        self._engine = engine
        self._peers = peers
        self._worker_index = worker_index
        self._tracing = tracing  # None: as [telemetry] says (tests pass their own)
        # A served gateway freezes its startup heap (hasten.server.heap) once built.
        self._is_heap_frozen = is_heap_frozen
        self._openapi = openapi_json()
        self.gateway: Gateway | None = None
        self._startup_lock = asyncio.Lock()
        self._is_stopping = False

    async def startup(self) -> Gateway:
        async with self._startup_lock:
            if self.gateway is None:
                self.gateway = self._build()
                if self._is_heap_frozen:
                    freeze_startup_heap()  # before any task it starts can be stalled by it
                _share_routing(self.gateway)
                if self._peers is not None and self.gateway.cache is not None:
                    self._peers.attach(self.gateway.cache)
        return self.gateway

    def _build(self) -> Gateway:
        cache_config = self.config.cache
        cache = None
        if cache_config.is_enabled:
            cache = build_cache(
                cache_config.backend,
                l1_max_bytes=cache_config.l1_max_bytes,
                sqlite_path=cache_config.sqlite_path,
                redis_url=cache_config.redis_url,
                sqlite_max_bytes=cache_config.sqlite_max_bytes,
            )
        transport = self._transport or _upstream_transport(self.config.server.upstream_client)
        server = self.config.server
        tracing = self._tracing
        if tracing is None:
            tracing = Tracing.from_config(self.config.telemetry)
        client = UpstreamClient(transport, rng=random.Random())
        fleet = FleetLink(self.config.fleet) if self.config.fleet.is_enabled else None
        keys = build_key_directory(self.config, fleet)
        auth = Authenticator(server.api_keys, server.admin_api_key, keys)
        policies = _policy_book(self.config)
        limiter = Limiter(fleet, self.config.prices, settings=self.config.limits)
        pipeline = Pipeline(
            config=self.config,
            router=ModelRouter(self.config),
            callers=auth,
            client=client,
            cache=cache,
            semantic=_semantic_tier(self.config, cache),
            policies=policies,
            limits=limiter,
            tracer=tracing,
            stats=Stats(is_per_tenant=bool(server.api_keys) or keys is not None),
        )
        responses = pipeline.states = build_response_state(self.config, fleet)
        gateway = Gateway(
            pipeline,
            auth,
            policies=policies,
            limiter=limiter,
            tracing=tracing,
            fleet=fleet,
            keys=keys,
            responses=responses,
        )
        if fleet is not None and self.config.fleet.is_coalescing:
            gateway.fleet_flights = pipeline.fleet = FleetCoalescer(fleet)
        if self.config.metrics.is_enabled:
            gateway.metrics = build_metrics(pipeline, transport, self._engine)
            pipeline.savings = gateway.metrics.saved
            pipeline.observers.append(gateway.metrics)
        # The dashboard's window is an observer too, after the metrics: they see the same
        # records, so its totals agree with a scrape. `[metrics] enabled = false` promises
        # no per-request observation at all: the dashboard then shows live state only.
        gateway.dashboard = dashboard.Dashboard(
            RollingWindow(),
            pipeline,
            auth,
            scrape=None if gateway.metrics is None else gateway.metrics.scrape,
            engine=self._engine,
            is_observing=self.config.metrics.is_enabled,
        )
        if gateway.dashboard.is_observing:
            pipeline.observers.append(gateway.dashboard.observe)
        return gateway

    async def shutdown(self) -> None:
        self._is_stopping = True
        gateway, self.gateway = self.gateway, None
        if gateway is None:
            return
        if self._peers is not None:
            self._peers.close()
        if gateway.semantic is not None:
            await gateway.semantic.aclose()
        if gateway.cache is not None:
            await gateway.cache.drain()
            await gateway.cache.aclose()
        if gateway.fleet_routing is not None:
            await gateway.fleet_routing.aclose()
        await gateway.client.aclose()
        if gateway.responses is not None:
            await gateway.responses.aclose()
        if gateway.keys is not None:
            await gateway.keys.aclose()
        await gateway.limiter.aclose()
        if gateway.fleet_flights is not None:
            await gateway.fleet_flights.aclose()
        if gateway.fleet is not None:
            await gateway.fleet.aclose()
        await gateway.tracing.shutdown()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    _log.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway or await self.startup()
        started_s = time.perf_counter()
        request_id = gateway.request_ids.next()
        start: Message | None = None

        async def tracked_send(message: Message) -> None:
            nonlocal start
            if start is None:
                start = message
                _stamp(message, started_s)
            await send(message)

        try:
            await self._serve_path(gateway, scope, receive, tracked_send, request_id)
        except HastenError as exc:
            _log_error(request_id, exc)
            gateway.stats.count(f"error_{exc.status_code}")
            if gateway.metrics is not None and OBSERVED_SCOPE_KEY not in scope:
                gateway.metrics.count_error(exc.status_code, exc.code)
            if start is None:
                await _send_error(tracked_send, exc, request_id, started_s, _api_of(scope))
        except ClientGone:
            gateway.stats.count("client_disconnects")
        except Exception:
            _log.exception("request %s: internal error", request_id)
            gateway.stats.count("error_500")
            if gateway.metrics is not None and OBSERVED_SCOPE_KEY not in scope:
                gateway.metrics.count_error(500, None)
            if start is None:
                error = HastenError("internal server error")
                await _send_error(tracked_send, error, request_id, started_s, _api_of(scope))
        finally:
            if self.config.server.log_format == "json":  # the human log stays quiet
                _log_access(scope, request_id, start, started_s)

    async def _serve_path(
        self, gateway: Gateway, scope: Scope, receive: Receive, send: Send, request_id: str
    ) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        endpoint = _ENDPOINTS.get(path)  # the model endpoints first: nearly every request
        if endpoint is not None:
            if method != "POST":
                raise MethodNotAllowed(f"{method} is not allowed on {path}; use POST", allow="POST")
            await handle(gateway.pipeline, endpoint, scope, receive, send, request_id)
            return
        if path in _COUNT_TOKENS_PATHS:
            if method != "POST":
                raise MethodNotAllowed(f"{method} is not allowed on {path}; use POST", allow="POST")
            await count_tokens(gateway.pipeline, scope, receive, send)
            return
        if response_endpoints.is_response_path(path) and gateway.responses is not None:
            await response_endpoints.handle(gateway.responses, gateway.auth, scope, send)
            return
        if path in admin.PATHS:
            await admin.handle(gateway, scope, receive, send)
            return
        if key_endpoints.is_key_path(path):
            await key_endpoints.handle(gateway, scope, receive, send)
            return
        if path == "/metrics" and gateway.metrics is not None:
            await serve_metrics(gateway.metrics, scope, send, gateway.auth)
            return
        if path in dashboard.PATHS and gateway.dashboard is not None:
            await gateway.dashboard.handle(scope, send)
            return
        if path not in _GET_PATHS:
            raise NotFound(f"Unknown path {path}", code="unknown_url")
        if method not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"{method} is not allowed on {path}; use GET", allow="GET, HEAD")
        if path == "/healthz":
            await send_json(send, 200, orjson.dumps({"status": "ok"}))
            return
        # With gateway keys only health and a bare readiness status are open; without
        # them every caller is anonymous anyway and these views stay open.
        authorization = header(scope, b"authorization")
        caller = None
        if gateway.auth.is_enforcing and (path != "/readyz" or authorization is not None):
            caller = await gateway.auth.resolve(authorization)  # 401 for a missing or bad key
        if path == "/readyz":
            await self._readyz(gateway, send, caller)
        elif path == "/openapi.json":
            await send_json(send, 200, self._openapi)
        elif path == "/stats":
            await send_json(send, 200, orjson.dumps(self._stats(gateway, caller)))
        else:
            await send_json(send, 200, orjson.dumps(await _list_models(gateway, caller)))

    async def _readyz(self, gateway: Gateway, send: Send, caller: Caller | None) -> None:
        if self._is_stopping:
            await send_json(send, 503, orjson.dumps({"status": "stopping"}))
            return
        body: dict[str, Any] = {"status": "ready"}
        is_enforcing = gateway.auth.is_enforcing
        if is_enforcing and caller is None:
            await send_json(send, 200, orjson.dumps(body))
            return
        if not is_enforcing or (caller is not None and caller.is_admin):
            body["cache"] = self._cache_state(gateway)
            if self._worker_index is not None:
                body["worker"] = {"index": self._worker_index, "pid": os.getpid()}
        if self._engine is not None:
            body["engine"] = self._engine.status()
        await send_json(send, 200, orjson.dumps(body))

    def _cache_state(self, gateway: Gateway) -> dict[str, Any]:
        if gateway.cache is None:
            return {"enabled": False}
        return {"enabled": True, "backend": self.config.cache.backend, **gateway.cache.stats()}

    def _stats(self, gateway: Gateway, caller: Caller | None) -> dict[str, Any]:
        if caller is not None and caller.tenant is not None:
            return {"tenant": caller.tenant, "requests": gateway.stats.of_tenant(caller.tenant)}
        kinds = _task_kinds()
        return {
            "requests": dict(gateway.stats.counts),
            "in_flight": len(gateway.coalescer),
            # asyncio tasks alive in the gateway's loop: flat under steady load, or a leak
            # (bench/reliability/soak.py samples it), and what they are made of.
            "tasks": sum(kinds.values()),
            "task_kinds": kinds,
            "cache": self._cache_state(gateway),
            # Semantic lookups by the question's script: hits, misses, why (full counters:
            # /admin/cache/stats).
            "semantic": (
                None if gateway.semantic is None else gateway.semantic.cache.script_stats()
            ),
        }


def _task_kinds() -> dict[str, int]:
    """Live tasks by coroutine and the innermost coroutine it awaits (``outer > inner``):
    what a growing ``tasks`` count is made of, and where it waits."""
    kinds: Counter[str] = Counter()
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        name = inner = getattr(coro, "__qualname__", type(coro).__name__)
        for _ in range(64):  # an await chain is short; the bound is for a cycle
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            if coro is None or not hasattr(coro, "__qualname__"):
                break
            inner = coro.__qualname__
        kinds[name if inner == name else f"{name} > {inner}"] += 1
    return dict(kinds.most_common())


def _policy_book(config: GatewayConfig) -> PolicyBook:
    models = {name: route.policy for name, route in config.models.items()}
    return PolicyBook(models, config.tenant_policies)


def _upstream_transport(name: str) -> Transport:
    """``[server] upstream_client``: hasten's lean client, or aiohttp's."""
    return AiohttpTransport() if name == "aiohttp" else LeanTransport()


def _share_routing(gateway: Gateway) -> None:
    """With ``[fleet] shared_routing``: every route's pool, synced with the fleet's."""
    if gateway.fleet is None or not gateway.config.fleet.is_sharing_routing:
        return
    pools = {route.name: gateway.client.pool_for(route) for route in gateway.router.routes()}
    gateway.fleet_routing = RoutingSync(gateway.fleet, pools)
    gateway.fleet_routing.start()


def _semantic_tier(config: GatewayConfig, cache: TieredCache | None) -> SemanticTier | None:
    """Loads the embedder only when the semantic tier is switched on (it costs memory)."""
    if not config.semantic.is_enabled or cache is None:
        return None
    from hasten.semantic.build import build_tier

    # Replicas sharing a Redis exact cache share semantic entries through it too.
    redis_url = config.cache.redis_url if config.cache.backend == "redis" else None
    return build_tier(config.semantic, cache, redis_url=redis_url)


async def _list_models(gateway: Gateway, caller: Caller | None) -> dict[str, Any]:
    """Configured models and aliases, plus the upstream's own list behind a wildcard (only
    those the caller's key may use)."""
    data: list[dict[str, Any]] = []
    seen: set[str] = set()
    if gateway.router.has_wildcard:
        for item in await _upstream_models(gateway):
            model_id = item.get("id")
            if isinstance(model_id, str) and model_id not in seen:
                seen.add(model_id)
                data.append(item)
    for name in gateway.router.listed_models():
        if name not in seen:
            seen.add(name)
            data.append({"id": name, "object": "model", "created": 0, "owned_by": "hasten"})
    visible = visible_models(data, caller, lambda name: gateway.router.resolve(name).name)
    return {"object": "list", "data": visible}


async def _upstream_models(gateway: Gateway) -> list[dict[str, Any]]:
    targets = gateway.router.wildcard_targets()
    if not targets:
        return []
    try:
        call = await gateway.client.get(targets[0], "/models", {"accept": "application/json"})
        try:
            body = await asyncio.wait_for(call.read(), MODELS_TIMEOUT_S)
        finally:
            call.close()
        parsed = orjson.loads(body) if call.status == 200 else {}
    except (HastenError, orjson.JSONDecodeError, TimeoutError) as exc:
        _log.warning("could not list upstream models: %s", exc)
        return []
    items = parsed.get("data") if isinstance(parsed, dict) else None
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _log_access(scope: Scope, request_id: str, start: Message | None, started_s: float) -> None:
    """One record per request for the JSON log: who, what, how it was answered, how fast."""
    headers = dict(start["headers"]) if start is not None else {}
    status = start["status"] if start is not None else None

    def text(name: bytes) -> str | None:
        value = headers.get(name)
        return None if value is None else value.decode("utf-8", "backslashreplace")

    _access_log.info(
        "request %s: %s %s %s",
        request_id,
        scope["method"],
        scope["path"],
        status if status is not None else "not answered (client gone)",
        extra={
            "request_id": request_id,
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "tenant": scope.get(TENANT_SCOPE_KEY),
            "api": scope.get(API_SCOPE_KEY),
            "model": scope.get(MODEL_SCOPE_KEY),
            "cache": text(b"x-hasten-cache"),
            "upstream": text(b"x-hasten-upstream"),
            "policy": text(POLICY_HEADER),
            "duration_ms": round((time.perf_counter() - started_s) * 1000.0, 3),
            "timing": text(b"server-timing"),
        },
    )


def _log_error(request_id: str, exc: HastenError) -> None:
    level = logging.WARNING if exc.status_code >= 500 else logging.INFO
    _log.log(
        level,
        "request %s: %d %s: %s",
        request_id,
        exc.status_code,
        exc.code,
        exc.message,
        extra={"request_id": request_id, "status": exc.status_code},
    )


async def _send_error(
    send: Send, exc: HastenError, request_id: str, started_s: float, api: Api
) -> None:
    gateway_ms = (time.perf_counter() - started_s) * 1000.0
    headers = [
        (b"x-hasten-cache", b"bypass"),  # nothing was served from or stored in the cache
        (b"x-hasten-request-id", request_id.encode()),
        (b"server-timing", f"hasten;dur={gateway_ms:.3f}".encode()),
    ]
    await send_error(send, exc, headers, api.render_error(exc))


def _api_of(scope: Scope) -> Api:
    """The client API a path belongs to, whose error shape its clients parse: Anthropic's
    under /v1/messages, OpenAI's everywhere else."""
    path: str = scope.get("path", "")
    if path.startswith(("/v1/messages", "/messages")):
        return MESSAGES_API
    return _ENDPOINTS.get(path, APIS["chat"])


def _stamp(start: Message, started_s: float) -> None:
    """Gives responses that did not set them (health, models, admin) the standard headers."""
    headers = start["headers"]
    for name, _ in headers:
        if name == b"x-hasten-cache":
            return
    gateway_ms = (time.perf_counter() - started_s) * 1000.0
    start["headers"] = [
        *headers,
        (b"x-hasten-cache", b"bypass"),
        (b"server-timing", f"hasten;dur={gateway_ms:.3f}".encode()),
    ]

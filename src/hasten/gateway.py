"""Everything the gateway runs, built once at startup and hung off one object: the request
path (``Pipeline``, with the parts it holds) and the services around it."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hasten.auth import Authenticator
from hasten.cache import TieredCache
from hasten.config import GatewayConfig
from hasten.limits.limiter import Limiter
from hasten.policy import PolicyBook
from hasten.proxy.flight import Coalescer
from hasten.proxy.fronts import FrontMemo
from hasten.proxy.pipeline import Pipeline
from hasten.proxy.stats import Stats
from hasten.routing.models import ModelRouter
from hasten.telemetry.tracing import Tracing
from hasten.upstream.client import UpstreamClient
from hasten.values.outcome import Observer

if TYPE_CHECKING:
    from hasten.dashboard import Dashboard
    from hasten.fleet.coalesce import FleetCoalescer
    from hasten.fleet.link import FleetLink
    from hasten.fleet.routing import RoutingSync
    from hasten.keys.directory import KeyDirectory
    from hasten.metrics.registry import Metrics
    from hasten.responses.state import ResponseState
    from hasten.semantic.tier import SemanticTier


class RequestIds:
    """Cheap unique request ids: a per-process prefix plus a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(4).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}-{next(self._counter):x}"


@dataclass
class Gateway:
    pipeline: Pipeline  # the request path, and the parts it holds (router, cache, client...)
    auth: Authenticator
    policies: PolicyBook = field(default_factory=PolicyBook)
    limiter: Limiter = field(default_factory=Limiter)  # gateway keys' limits
    tracing: Tracing = field(default_factory=Tracing)
    request_ids: RequestIds = field(default_factory=RequestIds)
    metrics: Metrics | None = None  # None with ``[metrics] enabled = false``
    dashboard: Dashboard | None = None  # GET /dashboard; built by the app at startup
    fleet: FleetLink | None = None  # the replicas' shared Redis ([fleet] redis_url)
    keys: KeyDirectory | None = None  # virtual keys ([keys] enabled), also in ``auth``
    fleet_routing: RoutingSync | None = None  # shared routing state ([fleet] shared_routing)
    fleet_flights: FleetCoalescer | None = None  # cross-replica coalescing ([fleet] coalescing)
    # The Responses API's stored responses, also the pipeline's ``states`` (GET
    # /v1/responses/{id}...); None: a gateway built without them (a 404 on those paths).
    responses: ResponseState | None = None

    # The pipeline's parts, as the admin API, /stats, /metrics and the dashboard read them.
    @property
    def config(self) -> GatewayConfig:
        return self.pipeline.config

    @property
    def router(self) -> ModelRouter:
        return self.pipeline.router

    @property
    def client(self) -> UpstreamClient:
        return self.pipeline.client

    @property
    def cache(self) -> TieredCache | None:
        return self.pipeline.cache

    @property
    def semantic(self) -> SemanticTier | None:
        return self.pipeline.semantic

    @property
    def stats(self) -> Stats:
        return self.pipeline.stats

    @property
    def coalescer(self) -> Coalescer:
        return self.pipeline.coalescer

    @property
    def fronts(self) -> FrontMemo:
        return self.pipeline.fronts

    @property
    def observers(self) -> list[Observer]:
        return self.pipeline.observers

"""Everything a request needs, built once at startup and hung off one object."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from hasten.auth import Authenticator
from hasten.cache import TieredCache
from hasten.config import GatewayConfig
from hasten.limits.limiter import Limiter
from hasten.metrics.outcome import Observer
from hasten.policy import PolicyBook
from hasten.proxy.flight import Coalescer
from hasten.proxy.fronts import FrontMemo
from hasten.routing.models import ModelRouter
from hasten.telemetry.tracing import Tracing
from hasten.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from hasten.dashboard import Dashboard
    from hasten.fleet.coalesce import FleetCoalescer
    from hasten.fleet.link import FleetLink
    from hasten.fleet.routing import RoutingSync
    from hasten.keys.directory import KeyDirectory
    from hasten.metrics.registry import Metrics
    from hasten.semantic.tier import SemanticTier


class EngineStatus(Protocol):
    """The local engine child's supervisor, as ``/readyz`` and the dashboard see it."""

    def status(self) -> dict[str, object]: ...


@dataclass
class Stats:
    """Request counters, served on ``GET /stats`` (a tenant key sees only its own)."""

    counts: Counter[str] = field(default_factory=Counter)
    # Only with gateway keys: their tenants are few and fixed, while pass-through tenants
    # (one per upstream key a client sends) would grow without bound.
    is_per_tenant: bool = False
    by_tenant: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, name: str, amount: int = 1, *, tenant: str | None = None) -> None:
        self.counts[name] += amount
        if tenant is not None and self.is_per_tenant:
            self.by_tenant.setdefault(tenant, Counter())[name] += amount

    def of_tenant(self, tenant: str) -> dict[str, int]:
        return dict(self.by_tenant.get(tenant, {}))


class RequestIds:
    """Cheap unique request ids: a per-process prefix plus a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(4).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}-{next(self._counter):x}"


@dataclass
class Gateway:
    config: GatewayConfig
    router: ModelRouter
    auth: Authenticator
    client: UpstreamClient
    cache: TieredCache | None
    semantic: SemanticTier | None = None
    policies: PolicyBook = field(default_factory=PolicyBook)
    coalescer: Coalescer = field(default_factory=Coalescer)
    fronts: FrontMemo = field(default_factory=FrontMemo)  # bodies seen before, resolved
    stats: Stats = field(default_factory=Stats)
    request_ids: RequestIds = field(default_factory=RequestIds)
    tracing: Tracing = field(default_factory=Tracing)
    metrics: Metrics | None = None  # None with ``[metrics] enabled = false``
    # Called once per finished completion/embeddings request (hasten.metrics.outcome).
    observers: list[Observer] = field(default_factory=list)
    dashboard: Dashboard | None = None  # GET /dashboard; built by the app at startup
    fleet: FleetLink | None = None  # the replicas' shared Redis ([fleet] redis_url)
    keys: KeyDirectory | None = None  # virtual keys ([keys] enabled), also in ``auth``
    limiter: Limiter = field(default_factory=Limiter)  # gateway keys' limits
    fleet_routing: RoutingSync | None = None  # shared routing state ([fleet] shared_routing)
    fleet_flights: FleetCoalescer | None = None  # cross-replica coalescing ([fleet] coalescing)

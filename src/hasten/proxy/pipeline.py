"""Everything the request path holds, built once at startup by the gateway.

The parts below the pipeline (cache, semantic tier, router, upstream client) come as they
are; the services above it come through the ports of ``hasten.proxy.ports``, real or null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hasten.apis.api import ParamFields
from hasten.cache import TieredCache
from hasten.config import GatewayConfig
from hasten.proxy.flight import Coalescer
from hasten.proxy.fronts import FrontMemo
from hasten.proxy.ports import (
    NO_FLEET,
    NO_LIMIT,
    NO_SAVINGS,
    NO_STATES,
    NO_TRACER,
    Callers,
    FleetFlights,
    Limit,
    LimitedRequest,
    Limits,
    Policies,
    ResponseStates,
    Savings,
    Tracer,
)
from hasten.proxy.stats import Stats
from hasten.routing.models import ModelRouter
from hasten.upstream.client import UpstreamClient
from hasten.values.outcome import Observer

if TYPE_CHECKING:
    from hasten.semantic.tier import SemanticTier


class _NoLimits:
    __slots__ = ()

    def open(self, request: LimitedRequest) -> Limit:
        return NO_LIMIT


class _NoPolicies:
    __slots__ = ()

    def apply(
        self,
        body: object,
        endpoint: str,
        route: str,
        tenant: str,
        fields: ParamFields | None = None,
    ) -> None:
        return None


@dataclass
class Pipeline:
    config: GatewayConfig
    router: ModelRouter
    callers: Callers
    client: UpstreamClient
    cache: TieredCache | None
    semantic: SemanticTier | None = None
    policies: Policies = field(default_factory=_NoPolicies)
    limits: Limits = field(default_factory=_NoLimits)
    tracer: Tracer = NO_TRACER
    savings: Savings = NO_SAVINGS
    fleet: FleetFlights = NO_FLEET
    states: ResponseStates = NO_STATES  # the Responses API's stored responses
    # Called once per finished model request (hasten.values.outcome), in order.
    observers: list[Observer] = field(default_factory=list)
    coalescer: Coalescer = field(default_factory=Coalescer)
    fronts: FrontMemo = field(default_factory=FrontMemo)  # bodies seen before, resolved
    stats: Stats = field(default_factory=Stats)

    def cache_stats(self) -> dict[str, Any]:
        """Every tier's counters, as the admin key (and the dashboard) sees them."""
        semantic = self.semantic.cache if self.semantic is not None else None
        return {
            "exact": self.cache.stats() if self.cache is not None else None,
            "semantic": semantic.stats() if semantic is not None else None,
        }

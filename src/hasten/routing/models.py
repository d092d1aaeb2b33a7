"""Model names to routes: aliases, explicit routes and the ``*`` wildcard. Pure logic.

Each configured route is built once (``Route``: its deployments and their upstreams, the
only copy of them the request path reads); a request resolves its model name once
(``ModelRouter.resolve``) and carries the ``ResolvedModel`` down to the cache and to
``UpstreamClient.open``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hasten.config import (
    WILDCARD_MODEL,
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    UpstreamConfig,
)
from hasten.config.cache_policy import ModelCachePolicy
from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.errors import ModelNotFound

# Resolutions are memoised per requested name; bounded because model names come from clients.
MAX_MEMOISED_NAMES = 10_000


@dataclass(frozen=True, slots=True)
class Route:
    """One configured route: where its requests go, built once at startup."""

    name: str  # as configured: ``*`` for the wildcard, whatever name a client sent
    deployments: tuple[DeploymentConfig, ...]  # best priority first
    upstreams: Mapping[str, UpstreamConfig]  # each deployment's upstream, by name
    routing: RoutingConfig
    cache: ModelCachePolicy
    upstream_model: str | None = None  # None: the name the client's request resolved to
    # Every upstream takes ``stream_options`` (see ``UpstreamConfig.has_stream_options``).
    has_stream_options: bool = True
    # Every upstream takes streams for non-stream requests (``UpstreamConfig.is_stream_upstream``)
    # and ``stream_options``, so the assembled body has its usage.
    is_stream_upstream: bool = True
    is_resuming_streams: bool = False  # ``ModelRoute.is_resuming_streams``

    @property
    def targets(self) -> tuple[UpstreamConfig, ...]:
        """The deployments' upstreams, in order."""
        return tuple(self.upstreams[d.upstream] for d in self.deployments)

    @property
    def max_answer_bytes(self) -> int:
        """The most of one answer any of the route's upstreams may send (what a copy of
        it relayed from another replica may hold, hasten.fleet)."""
        return max(upstream.max_answer_bytes for upstream in self.upstreams.values())


def route_deployments(route: ModelRoute) -> tuple[DeploymentConfig, ...]:
    """A route's deployments; ``upstream`` + ``fallbacks`` become one priority tier each."""
    if route.routing.deployments:
        return route.routing.deployments
    names = (route.upstream, *route.fallbacks)
    return tuple(DeploymentConfig(upstream=name, priority=i) for i, name in enumerate(names))


def build_route(
    route: ModelRoute, upstreams: Mapping[str, UpstreamConfig], default_cache: ModelCachePolicy
) -> Route:
    deployments = route_deployments(route)
    used = {d.upstream: upstreams[d.upstream] for d in deployments}
    return Route(
        name=route.name,
        deployments=deployments,
        upstreams=used,
        routing=route.routing,
        cache=route.cache or default_cache,
        upstream_model=route.upstream_model,
        has_stream_options=all(u.has_stream_options for u in used.values()),
        is_stream_upstream=all(
            u.is_stream_upstream and u.has_stream_options for u in used.values()
        ),
        is_resuming_streams=route.is_resuming_streams,
    )


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """The answer to "where does this model name go?". ``requested``: the name the client
    sent (an alias, or ``name`` itself); ``name``: what it resolved to (the cache's model);
    ``route``: the configured route serving it (shared by every name that resolves to it)."""

    name: str
    upstream_model: str
    route: Route
    # Not part of equality: an alias and its name resolve to the same route.
    requested: str = field(default="", compare=False)

    @property
    def is_renamed(self) -> bool:
        """Whether the body's ``model`` must be rewritten for the upstream (an alias, or a
        route with its own ``upstream_model``)."""
        return self.upstream_model != (self.requested or self.name)

    @property
    def cache(self) -> ModelCachePolicy:
        return self.route.cache

    @property
    def targets(self) -> tuple[UpstreamConfig, ...]:
        return self.route.targets

    @property
    def has_stream_options(self) -> bool:
        return self.route.has_stream_options


class ModelRouter:
    def __init__(self, config: GatewayConfig) -> None:
        self._aliases = dict(config.aliases)
        default_cache = _default_cache(config.cache)
        self._routes = {
            name: build_route(route, config.upstreams, default_cache)
            for name, route in config.models.items()
        }
        # Resolution is memoised per name: the route table is immutable after startup.
        self._resolved: dict[str, ResolvedModel] = {}

    def resolve(self, requested: str) -> ResolvedModel:
        resolved = self._resolved.get(requested)
        if resolved is not None:
            return resolved
        name = self._aliases.get(requested, requested)
        route = self._routes.get(name) or self._routes.get(WILDCARD_MODEL)
        if route is None:
            # OpenAI's words, also a key's answer for a model it may not use (hasten.values.caller):
            # the two cannot be told apart.
            raise ModelNotFound(
                f"The model `{requested}` does not exist or you do not have access to it.",
                param="model",
            )
        resolved = ResolvedModel(
            name=name,
            upstream_model=route.upstream_model or name,
            route=route,
            requested=requested,
        )
        if len(self._resolved) < MAX_MEMOISED_NAMES:
            self._resolved[requested] = resolved
        return resolved

    def listed_models(self) -> list[str]:
        """Configured model names and aliases, for ``GET /v1/models``."""
        names = [n for n in self._routes if n != WILDCARD_MODEL]
        return names + [a for a in self._aliases if a not in self._routes]

    def routes(self) -> tuple[Route, ...]:
        """Every configured route, the wildcard included."""
        return tuple(self._routes.values())

    @property
    def has_wildcard(self) -> bool:
        return WILDCARD_MODEL in self._routes

    def wildcard_targets(self) -> tuple[UpstreamConfig, ...]:
        route = self._routes.get(WILDCARD_MODEL)
        return () if route is None else route.targets


def _default_cache(cache: CacheConfig) -> ModelCachePolicy:
    return ModelCachePolicy(
        is_enabled=cache.is_enabled,
        is_deterministic_only=cache.is_deterministic_only,
        ttl_s=cache.ttl_s,
    )

"""Model names to upstreams: aliases, explicit routes and the ``*`` wildcard. Pure logic."""

from __future__ import annotations

from dataclasses import dataclass, field

from hasten.cache.policy import ModelCachePolicy
from hasten.config import (
    WILDCARD_MODEL,
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    UpstreamConfig,
)
from hasten.errors import ModelNotFound


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """The answer to "where does this model name go?". ``requested``: the name the client
    sent (an alias, or ``name`` itself); ``name``: the route it resolved to."""

    name: str
    upstream_model: str
    targets: tuple[UpstreamConfig, ...]
    cache: ModelCachePolicy
    # Not part of equality: an alias and its name resolve to the same route.
    requested: str = field(default="", compare=False)
    # Every target takes ``stream_options`` (see ``UpstreamConfig.has_stream_options``).
    has_stream_options: bool = True

    @property
    def is_renamed(self) -> bool:
        """Whether the body's ``model`` must be rewritten for the upstream (an alias, or a
        route with its own ``upstream_model``)."""
        return self.upstream_model != (self.requested or self.name)


class ModelRouter:
    def __init__(self, config: GatewayConfig) -> None:
        self._aliases = dict(config.aliases)
        self._routes = dict(config.models)
        self._upstreams = dict(config.upstreams)
        self._default_cache = _default_cache(config.cache)
        # Resolution is memoised per name: the route table is immutable after startup.
        self._resolved: dict[str, ResolvedModel] = {}

    def resolve(self, requested: str) -> ResolvedModel:
        resolved = self._resolved.get(requested)
        if resolved is not None:
            return resolved
        name = self._aliases.get(requested, requested)
        route = self._routes.get(name) or self._routes.get(WILDCARD_MODEL)
        if route is None:
            raise ModelNotFound(f"The model '{requested}' does not exist", param="model")
        resolved = self._build(requested, name, route)
        if len(self._resolved) < 10_000:  # bounded: model names come from clients
            self._resolved[requested] = resolved
        return resolved

    def _build(self, requested: str, name: str, route: ModelRoute) -> ResolvedModel:
        targets = tuple(self._upstreams[u] for u in (route.upstream, *route.fallbacks))
        return ResolvedModel(
            name=name,
            upstream_model=route.upstream_model or name,
            targets=targets,
            cache=route.cache or self._default_cache,
            requested=requested,
            has_stream_options=all(t.has_stream_options for t in targets),
        )

    def listed_models(self) -> list[str]:
        """Configured model names and aliases, for ``GET /v1/models``."""
        names = [n for n in self._routes if n != WILDCARD_MODEL]
        return names + [a for a in self._aliases if a not in self._routes]

    @property
    def has_wildcard(self) -> bool:
        return WILDCARD_MODEL in self._routes

    def wildcard_targets(self) -> tuple[UpstreamConfig, ...]:
        route = self._routes.get(WILDCARD_MODEL)
        if route is None:
            return ()
        return tuple(self._upstreams[u] for u in (route.upstream, *route.fallbacks))


def _default_cache(cache: CacheConfig) -> ModelCachePolicy:
    return ModelCachePolicy(
        is_enabled=cache.is_enabled,
        is_deterministic_only=cache.is_deterministic_only,
        ttl_s=cache.ttl_s,
    )

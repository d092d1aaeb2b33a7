"""The config actually served, built from a parsed one by one function, ``served_config``.

A parsed file says what the operator wrote; what the gateway serves adds, in this order,
the flag and environment overrides of ``hasten serve``, the local engine's upstream (once
its child process listens), the demo upstream (with nothing else configured) and the two
routes behind a ``[hybrid]`` model name. Every step can be applied again to its own output
without changing it, so the app applies the steps that need no process to any config it is
given, and a config served by ``hasten serve`` passes through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hasten.config.tables import (
    CLIENT_APIS,
    WILDCARD_MODEL,
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    UpstreamConfig,
    check_cache,
    with_upstream,
)
from hasten.local.gateway import with_hybrid_routes, with_local_upstream

DEMO_UPSTREAM = "simulator"


@dataclass(frozen=True)
class Overrides:
    """What ``hasten serve``'s flags and ``HASTEN_*`` variables set over the file; None:
    not given, the file's value stays."""

    host: str | None = None
    port: int | None = None
    log_level: str | None = None
    log_format: str | None = None
    num_workers: int | None = None
    cache_backend: str | None = None
    sqlite_path: str | None = None
    redis_url: str | None = None
    is_cache_disabled: bool = False
    upstream_url: str | None = None  # fronted for every model name (``--upstream``)
    upstream_api_key: str | None = field(default=None, repr=False)
    metrics_port: int | None = None  # ``--metrics-port``: /metrics on a port of its own
    is_metrics_disabled: bool = False  # ``--no-metrics``


def served_config(
    config: GatewayConfig,
    overrides: Overrides | None = None,
    *,
    local_url: str | None = None,
    local_has_tools: bool = False,
    local_max_in_flight: int = 0,
    demo_url: str | None = None,
) -> GatewayConfig:
    """``config`` as served: overrides, then the local engine at ``local_url`` or (with no
    upstream configured) the demo simulator at ``demo_url``, then the hybrid routes."""
    if overrides is not None:
        config = _overridden(config, overrides)
    if local_url is not None:
        config = with_local_upstream(
            config, local_url, has_tools=local_has_tools, max_in_flight=local_max_in_flight
        )
    elif demo_url is not None and config.is_simulated:
        config = _with_demo_upstream(config, demo_url)
    return with_hybrid_routes(config)


def _overridden(config: GatewayConfig, overrides: Overrides) -> GatewayConfig:
    server = config.server
    server = replace(
        server,
        host=overrides.host or server.host,
        port=server.port if overrides.port is None else overrides.port,
        log_level=overrides.log_level or server.log_level,
        log_format=overrides.log_format or server.log_format,
        num_workers=overrides.num_workers or server.num_workers,
    )
    config = replace(config, server=server, cache=_cache_overridden(config.cache, overrides))
    if overrides.is_metrics_disabled:
        config = replace(config, metrics=replace(config.metrics, is_enabled=False))
    elif overrides.metrics_port is not None:
        config = replace(config, metrics=replace(config.metrics, port=overrides.metrics_port))
    if overrides.upstream_url:
        config = with_upstream(config, overrides.upstream_url, overrides.upstream_api_key)
    return config


def _cache_overridden(cache: CacheConfig, overrides: Overrides) -> CacheConfig:
    backend = overrides.cache_backend
    if overrides.redis_url and backend is None:
        backend = "redis"  # a Redis URL alone is enough to ask for the Redis tier
    cache = replace(
        cache,
        backend=backend or cache.backend,
        sqlite_path=overrides.sqlite_path or cache.sqlite_path,
        redis_url=overrides.redis_url or cache.redis_url,
        is_enabled=cache.is_enabled and not overrides.is_cache_disabled,
    )
    return check_cache(cache, "--cache-backend/--redis-url")


def _with_demo_upstream(config: GatewayConfig, url: str) -> GatewayConfig:
    # The simulator speaks every client API natively (hasten.simulator).
    upstream = UpstreamConfig(name=DEMO_UPSTREAM, url=url, apis=CLIENT_APIS)
    return replace(
        config,
        upstreams={DEMO_UPSTREAM: upstream},
        models={WILDCARD_MODEL: ModelRoute(name=WILDCARD_MODEL, upstream=DEMO_UPSTREAM)},
    )

"""The gateway's configuration: the TOML file's tables, parsed into frozen dataclasses.

``tables`` holds every table of the gateway's file and ``parse_config``; ``reader`` is
the TOML reader every table goes through (and the one shape of a config error);
``semantic`` is the ``[semantic]`` table; ``served`` builds the config actually served
from a parsed one (import it as ``hasten.served``: it builds on the local edge's
routes, which import this package).
"""

from __future__ import annotations

from hasten.config.tables import (
    DEFAULT_ADMIN_KEY_ENV,
    DEFAULT_HOST,
    DEFAULT_PORT,
    WILDCARD_MODEL,
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    ServerConfig,
    TenantKey,
    TimeoutConfig,
    UpstreamConfig,
    check_cache,
    load_config,
    parse_config,
    redact_url,
    with_upstream,
)

__all__ = [
    "DEFAULT_ADMIN_KEY_ENV",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "WILDCARD_MODEL",
    "CacheConfig",
    "GatewayConfig",
    "ModelRoute",
    "RetryConfig",
    "ServerConfig",
    "TenantKey",
    "TimeoutConfig",
    "UpstreamConfig",
    "check_cache",
    "load_config",
    "parse_config",
    "redact_url",
    "with_upstream",
]

"""The gateway's configuration: the TOML file's tables, parsed into frozen dataclasses.

``tables`` holds every table of the gateway's file and ``parse_config``; ``reader`` is
the TOML reader they all go through; ``semantic`` is the ``[semantic]`` table.
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

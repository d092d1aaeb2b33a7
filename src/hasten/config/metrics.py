"""The ``[metrics]`` table: whether ``/metrics`` is served, where, and with which labels."""

from __future__ import annotations

from dataclasses import dataclass

from hasten.config.reader import TomlTable

DEFAULT_METRICS_HOST = "127.0.0.1"  # a separate metrics port is open, so loopback by default


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    is_enabled: bool = True  # false: no /metrics, no per-request observation at all
    port: int | None = None  # a second listener serving only /metrics (no auth on it)
    host: str = DEFAULT_METRICS_HOST  # where that listener binds
    # A tenant label multiplies every series by the number of tenants: off unless asked.
    is_tenant_label: bool = False


def parse_metrics(table: TomlTable) -> MetricsConfig:
    d = MetricsConfig()
    port = table.get("port", int, None)
    config = MetricsConfig(
        is_enabled=table.boolean("enabled", d.is_enabled),
        port=port,
        host=table.string("host", d.host),
        is_tenant_label=table.boolean("tenant_label", d.is_tenant_label),
    )
    table.finish()
    if port is not None and not 0 < port < 65536:
        raise table.error("port", f"must be between 1 and 65535, got {port}")
    return config


def describe_metrics(config: MetricsConfig) -> str:
    """One line for ``hasten check-config``."""
    if not config.is_enabled:
        return "metrics: off"
    where = "GET /metrics on the gateway port"
    if config.port is not None:
        where += f" and on {config.host}:{config.port}"
    tenant = "with" if config.is_tenant_label else "without"
    return f"metrics: {where}, {tenant} a tenant label"

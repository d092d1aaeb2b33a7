"""``[telemetry]``: OpenTelemetry tracing, exported over OTLP/HTTP; off unless configured.

Parsed without importing OpenTelemetry: only whether the ``otel`` extra is installed is
checked, so a config naming an endpoint fails at load time, not at the first request.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field

from hasten.config.reader import TomlTable

DEFAULT_SERVICE_NAME = "hasten"
DEFAULT_MAX_QUEUE_SPANS = 2048
DEFAULT_EXPORT_TIMEOUT_S = 10.0
DEFAULT_EXPORT_INTERVAL_S = 1.0
# What the ``otel`` extra installs; the exporter pulls in the SDK and the API.
OTEL_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http")


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """Tracing is on when ``otlp_endpoint`` is set (e.g. http://127.0.0.1:4318/v1/traces)."""

    otlp_endpoint: str | None = None
    service_name: str = DEFAULT_SERVICE_NAME
    sample_ratio: float = 1.0  # of traces started here; a client's sampled flag is honoured
    # Sent with every export (a collector's API key, say): values are never printed.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS  # beyond this, spans are dropped
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S

    @property
    def is_enabled(self) -> bool:
        return self.otlp_endpoint is not None


def is_otel_installed() -> bool:
    """True when the ``otel`` extra (SDK and OTLP/HTTP exporter) can be imported."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in OTEL_MODULES)
    except ModuleNotFoundError:  # a parent package is missing altogether
        return False


def parse_telemetry(table: TomlTable) -> TelemetryConfig:
    d = TelemetryConfig()
    endpoint = table.optional_string("otlp_endpoint")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise table.error("otlp_endpoint", f"expected an http:// or https:// URL, got {endpoint!r}")
    header_table = table.table("headers")
    headers: dict[str, str] = {}
    for name in header_table.data:
        headers[name] = header_table.string(name, "")
    header_table.finish()
    config = TelemetryConfig(
        otlp_endpoint=endpoint,
        service_name=table.string("service_name", d.service_name),
        sample_ratio=table.number("sample_ratio", d.sample_ratio),
        headers=headers,
        max_queue_spans=table.integer("max_queue_spans", d.max_queue_spans, minimum=1),
        export_timeout_s=table.number("export_timeout_s", d.export_timeout_s),
        export_interval_s=table.number("export_interval_s", d.export_interval_s),
    )
    table.finish()
    if config.sample_ratio > 1.0:
        raise table.error("sample_ratio", f"must be <= 1, got {config.sample_ratio:g}")
    if config.is_enabled and not is_otel_installed():
        raise table.error(
            "otlp_endpoint",
            "tracing needs the otel extra, which is not installed: pip install 'hasten[otel]'",
        )
    return config

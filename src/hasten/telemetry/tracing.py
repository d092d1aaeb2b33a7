"""``Tracing``: built once at startup, it starts each request's root span (or nothing).

Off unless ``[telemetry] otlp_endpoint`` is set, and then the request path pays one
attribute read per request: ``start_request`` hands back ``NO_STAGE`` and OpenTelemetry is
never imported. On, each completion or embeddings request gets a SERVER span, parented by
the client's W3C ``traceparent`` when it sent one, with children for the cache lookup,
the semantic lookup and its embedding, the coalescing wait, each upstream attempt and the
replay of a stored answer; the upstream gets the attempt span's ``traceparent``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from hasten.config.telemetry import TelemetryConfig
from hasten.proxy.spans import operation
from hasten.values.stage import NO_STAGE, AttributeValue, Stage
from hasten.wire.asgi import Scope, header

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

    from hasten.telemetry.otel import OtelTracer

TRACE_HEADERS = (b"traceparent", b"tracestate")


class Tracing:
    """The gateway's tracer; ``Tracing()`` is the off switch (``is_enabled`` False)."""

    __slots__ = ("_tracer", "is_enabled")

    def __init__(self, tracer: OtelTracer | None = None) -> None:
        self._tracer = tracer
        self.is_enabled = tracer is not None

    @classmethod
    def from_config(
        cls, config: TelemetryConfig, *, processor: SpanProcessor | None = None
    ) -> Tracing:
        """Tracing as configured; ``processor`` (a test's in-memory exporter) turns it on
        without an OTLP endpoint and replaces the batch exporter."""
        if not config.is_enabled and processor is None:
            return cls()
        from hasten.telemetry.otel import build_tracer  # needs the otel extra

        return cls(build_tracer(config, processor))

    def start_request(self, scope: Scope, endpoint: str, request_id: str) -> Stage:
        """The root span of one API request; the caller ends it (it is a context manager)."""
        tracer = self._tracer
        if tracer is None:
            return NO_STAGE
        carrier: dict[str, str] = {}
        for name in TRACE_HEADERS:
            value = header(scope, name)
            if value is not None:
                carrier[name.decode()] = value.decode("latin-1")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": operation(endpoint),
            "http.request.method": str(scope.get("method", "POST")),
            "url.path": str(scope.get("path", "")),
            "hasten.request_id": request_id,
        }
        return tracer.start_root(operation(endpoint), carrier, attributes)

    async def shutdown(self) -> None:
        """Flushes queued spans off the event loop (the exporter's timeout bounds it)."""
        if self._tracer is not None:
            await asyncio.to_thread(self._tracer.shutdown)

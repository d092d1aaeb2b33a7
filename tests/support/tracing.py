"""Tracing in tests: a gateway whose spans land in the SDK's in-memory exporter, and an
upstream recorder that keeps the headers each chat request arrived with."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hasten.app import HastenApp
from hasten.config import GatewayConfig
from hasten.config.telemetry import TelemetryConfig
from hasten.server.connection import protocol_for
from hasten.telemetry.tracing import Tracing
from tests.support.servers import ServerThread


def in_memory_tracing(**config: Any) -> tuple[Tracing, InMemorySpanExporter]:
    """Tracing on, exporting each span as it ends into the returned exporter."""
    exporter = InMemorySpanExporter()
    tracing = Tracing.from_config(
        TelemetryConfig(**config), processor=SimpleSpanProcessor(exporter)
    )
    return tracing, exporter


@contextmanager
def traced_gateway(
    config: GatewayConfig, tracing: Tracing | None = None
) -> Iterator[tuple[ServerThread, InMemorySpanExporter | None]]:
    """A running gateway with in-memory tracing (or ``tracing`` as given, e.g. ``Tracing()``)."""
    exporter = None
    if tracing is None:
        tracing, exporter = in_memory_tracing()
    app = HastenApp(config, tracing=tracing)
    with ServerThread(app, lifespan="on", http=protocol_for(config.server)) as server:
        yield server, exporter


class HeaderRecorder:
    """ASGI middleware in front of an upstream: keeps each chat request's headers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


def wait_for_spans(
    exporter: InMemorySpanExporter, name: str, count: int = 1, timeout_s: float = 10.0
) -> list[ReadableSpan]:
    """Every finished span, once ``count`` named ``name`` have ended (root spans end just
    after the client got its last byte)."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = list(exporter.get_finished_spans())
        if sum(span.name == name for span in spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.02)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """The direct children of ``parent``, in the order they started."""
    assert parent.context is not None
    found = [
        span
        for span in spans
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda span: span.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})

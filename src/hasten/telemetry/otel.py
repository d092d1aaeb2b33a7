"""The OpenTelemetry side of tracing: the tracer provider, its exporter, the real stage.

Imported only when tracing is configured (it needs the ``otel`` extra). Spans are parented
explicitly, by the context each stage carries, never through OpenTelemetry's current-span
context variable: an attempt started in its own task still nests under its request.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hasten import __version__
from hasten.config.telemetry import TelemetryConfig
from hasten.errors import HastenError
from hasten.values.stage import AttributeValue, Stage

INSTRUMENTATION_NAME = "hasten"
MAX_EXPORT_BATCH_SPANS = 512  # the SDK's default; it must not exceed the queue


class SpanStage(Stage):
    """A stage backed by an OpenTelemetry span; its children are parented by its context."""

    __slots__ = ("_context", "_propagator", "_span", "_tracer")

    def __init__(
        self, tracer: Tracer, propagator: TraceContextTextMapPropagator, span: Span
    ) -> None:
        self._tracer, self._propagator, self._span = tracer, propagator, span
        self._context = set_span_in_context(span, Context())

    @property
    def is_recording(self) -> bool:
        return self._span.is_recording()

    @property
    def span(self) -> Span:
        return self._span

    def child(self, name: str, *, is_client: bool = False) -> Stage:
        kind = SpanKind.CLIENT if is_client else SpanKind.INTERNAL
        span = self._tracer.start_span(name, context=self._context, kind=kind)
        return SpanStage(self._tracer, self._propagator, span)

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def set(self, key: str, value: AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def fail(self, error: BaseException | str, *, error_type: str = "") -> None:
        if isinstance(error, BaseException):
            description = str(error) or type(error).__name__
            if not error_type:
                code = error.code if isinstance(error, HastenError) else None
                error_type = code or type(error).__name__
        else:
            description = error
        self._span.set_attribute("error.type", error_type or description)
        self._span.set_status(Status(StatusCode.ERROR, description))

    def end(self) -> None:
        self._span.end()

    def inject(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        carrier = dict(headers)
        self._propagator.inject(carrier, context=self._context)
        return carrier


class OtelTracer:
    """Starts root spans under a client's W3C trace context (or a fresh trace)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
        self._propagator = TraceContextTextMapPropagator()

    def start_root(
        self, name: str, carrier: Mapping[str, str], attributes: Mapping[str, AttributeValue]
    ) -> SpanStage:
        parent = self._propagator.extract(carrier, context=Context()) if carrier else Context()
        span = self._tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        return SpanStage(self._tracer, self._propagator, span)

    def shutdown(self) -> None:
        """Exports what is queued (bounded by the exporter's timeout) and stops."""
        self.provider.shutdown()


def build_tracer(config: TelemetryConfig, processor: SpanProcessor | None = None) -> OtelTracer:
    """A tracer exporting to ``config.otlp_endpoint``, or into ``processor`` (tests)."""
    resource = Resource.create({SERVICE_NAME: config.service_name, SERVICE_VERSION: __version__})
    sampler = ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(processor or _batch_exporter(config))
    return OtelTracer(provider)


def _batch_exporter(config: TelemetryConfig) -> SpanProcessor:
    """Exports from the processor's own thread, never the event loop; when the queue is full
    new spans are dropped rather than requests slowed down."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    assert config.otlp_endpoint is not None
    exporter = OTLPSpanExporter(
        endpoint=config.otlp_endpoint,
        headers=dict(config.headers),
        timeout=config.export_timeout_s,
    )
    return BatchSpanProcessor(
        exporter,
        max_queue_size=config.max_queue_spans,
        max_export_batch_size=min(MAX_EXPORT_BATCH_SPANS, config.max_queue_spans),
        schedule_delay_millis=config.export_interval_s * 1000.0,
        export_timeout_millis=config.export_timeout_s * 1000.0,
    )

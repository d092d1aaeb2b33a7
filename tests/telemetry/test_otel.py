"""The real stage and the OTLP/HTTP export, against a loopback collector that parses the
protobuf it is sent (opentelemetry-proto), as a real collector would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind, StatusCode

from hasten.config.telemetry import TelemetryConfig
from hasten.errors import UpstreamTimeout
from hasten.telemetry.tracing import Tracing
from tests.support.tracing import attrs, in_memory_tracing

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "headers": [(b"traceparent", TRACEPARENT.encode())],
}


class _Collector:
    """Keeps every OTLP export request it receives, and the headers it came with."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.received = threading.Event()


@contextmanager
def collector() -> Iterator[tuple[str, _Collector]]:
    seen = _Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            seen.requests.append(request)
            seen.headers.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()
            seen.received.set()

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces", seen
    finally:
        server.shutdown()
        server.server_close()


async def test_spans_are_exported_over_otlp_http_with_the_configured_headers() -> None:
    with collector() as (url, seen):
        config = TelemetryConfig(
            otlp_endpoint=url,
            service_name="edge-gw",
            headers={"x-collector-key": "k-123"},
            export_interval_s=0.05,
        )
        tracing = Tracing.from_config(config)
        assert tracing.is_enabled
        with tracing.start_request(SCOPE, "chat", "req-1") as root:
            root.rename("chat sim-model")
            with root.child("cache.lookup") as lookup:
                lookup.set("hasten.cache.is_hit", False)
        await tracing.shutdown()  # flushes the batch
        assert seen.received.wait(10)
    spans = [
        (resource_spans.resource, span)
        for request in seen.requests
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    by_name = {span.name: span for _, span in spans}
    assert set(by_name) == {"chat sim-model", "cache.lookup"}
    root_span, lookup_span = by_name["chat sim-model"], by_name["cache.lookup"]
    assert root_span.trace_id.hex() == TRACEPARENT.split("-")[1]
    assert root_span.parent_span_id.hex() == TRACEPARENT.split("-")[2]
    assert lookup_span.parent_span_id == root_span.span_id
    resource = {a.key: a.value.string_value for a in spans[0][0].attributes}
    assert resource["service.name"] == "edge-gw"
    assert seen.headers[0]["x-collector-key"] == "k-123"
    assert seen.headers[0]["content-type"] == "application/x-protobuf"


def test_a_stage_marks_failures_but_not_a_refused_request() -> None:
    tracing, exporter = in_memory_tracing()
    with pytest.raises(UpstreamTimeout), tracing.start_request(SCOPE, "chat", "r1"):
        raise UpstreamTimeout("slow", code="upstream_total_timeout")
    with pytest.raises(LookupError), tracing.start_request(SCOPE, "embeddings", "r2"):
        raise LookupError("bug")
    (timeout, bug) = exporter.get_finished_spans()
    assert timeout.kind is SpanKind.SERVER and timeout.status.status_code is StatusCode.ERROR
    assert attrs(timeout)["error.type"] == "upstream_total_timeout"
    assert attrs(timeout)["http.response.status_code"] == 504
    assert bug.name == "embeddings" and attrs(bug)["error.type"] == "LookupError"
    assert attrs(bug)["gen_ai.operation.name"] == "embeddings"


def test_sampled_out_traces_still_propagate_their_context() -> None:
    tracing, exporter = in_memory_tracing(sample_ratio=0.0)
    scope = {**SCOPE, "headers": []}
    with tracing.start_request(scope, "chat", "r1") as root:
        assert not root.is_recording
        attempt = root.child("upstream", is_client=True)
        headers = attempt.inject({"accept": "application/json"})
        attempt.end()
    _, trace_id, _, flags = headers["traceparent"].split("-")
    assert int(flags, 16) & 1 == 0  # not sampled, yet the trace goes on upstream
    assert int(trace_id, 16) != 0
    assert exporter.get_finished_spans() == ()

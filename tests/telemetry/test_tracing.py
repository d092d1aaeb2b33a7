"""Tracing through a real gateway and real simulators on loopback, read back from the SDK's
in-memory exporter: the span tree of a hedged, failed-over request, a cache hit, a
coalesced follower, the client's and the upstream's ``traceparent``, and tracing off.

Latency margins as in tests/routing/test_gateway.py: a 300 ms hedge against a 3 s straggler.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.trace import SpanKind, StatusCode

from hasten.cache import build_cache
from hasten.config import CacheConfig, RetryConfig
from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.semantic.tier import SemanticTier
from hasten.simulator import SimConfig, build_app
from hasten.telemetry.otel import SpanStage
from hasten.telemetry.tracing import Tracing
from hasten.values.stage import NO_STAGE
from tests.routing.test_gateway import ALWAYS_HEDGE, routed_config, simulators
from tests.support.gateway import chat_body, sim_stats
from tests.support.semantic import chat, make_cache
from tests.support.servers import ServerThread
from tests.support.tracing import (
    HeaderRecorder,
    attrs,
    children,
    in_memory_tracing,
    named,
    traced_gateway,
    wait_for_spans,
)

ROOT = "chat sim-model"
CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"


def _post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60.0)


def _traceparent_ids(value: str) -> tuple[int, int]:
    _, trace_id, span_id, _ = value.split("-")
    return int(trace_id, 16), int(span_id, 16)


def test_a_hedged_failed_over_request_has_its_attempts_as_sibling_spans() -> None:
    recorders = {
        "flaky": HeaderRecorder(build_app(SimConfig(error_rate=1.0))),
        "slow": HeaderRecorder(build_app(SimConfig(ttft_base_ms=3000, output_tokens=5))),
        "fast": HeaderRecorder(build_app(SimConfig(ttft_base_ms=50, output_tokens=9))),
    }
    with (
        ServerThread(recorders["flaky"]) as flaky,
        ServerThread(recorders["slow"]) as slow,
        ServerThread(recorders["fast"]) as fast,
    ):
        config = routed_config(
            {"flaky": flaky, "slow": slow, "fast": fast},
            RoutingConfig(hedge=ALWAYS_HEDGE),
            [
                DeploymentConfig("flaky"),
                DeploymentConfig("slow", priority=1),
                DeploymentConfig("fast", priority=2),
            ],
            retry=RetryConfig(max_retries=0),
        )
        with traced_gateway(config) as (gateway, exporter):
            assert exporter is not None
            body = chat_body("hedge and fail over", stream=True)
            body["stream_options"] = {"include_usage": True}
            response = _post(gateway.url, body)
            spans = wait_for_spans(exporter, ROOT)
    assert response.status_code == 200
    assert response.headers["x-hasten-failover"] == "flaky=500"
    assert response.headers["x-hasten-hedge"] == "won"
    (root,) = named(spans, ROOT)
    assert root.kind is SpanKind.SERVER and root.parent is None
    assert root.status.status_code is StatusCode.UNSET
    root_attrs = attrs(root)
    assert root_attrs["gen_ai.operation.name"] == "chat"
    assert root_attrs["gen_ai.request.model"] == "sim-model"
    assert root_attrs["gen_ai.request.temperature"] == 0
    assert root_attrs["gen_ai.response.model"] == "sim-model"
    assert root_attrs["gen_ai.usage.output_tokens"] == 9
    assert root_attrs["http.response.status_code"] == 200
    assert root_attrs["hasten.request_id"] == response.headers["x-hasten-request-id"]
    assert root_attrs["hasten.cache"] == "bypass"  # this config has the cache off
    attempts = [span for span in children(spans, root) if span.kind is SpanKind.CLIENT]
    assert [span.name for span in attempts] == ["upstream flaky", "upstream slow", "upstream fast"]
    failed, lost, won = (attrs(span) for span in attempts)
    assert failed["hasten.attempt.outcome"] == "failed"
    assert failed["http.response.status_code"] == 500 and failed["error.type"] == "500"
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert lost["hasten.attempt.outcome"] == "lost"
    assert lost["hasten.attempt.failover_reason"] == "500"
    assert lost["hasten.attempt.is_hedge"] is False
    assert won["hasten.attempt.outcome"] == "won" and won["hasten.attempt.is_hedge"] is True
    assert won["http.response.status_code"] == 200 and won["hasten.attempt.ttfb_ms"] > 0
    assert [a["hasten.attempt.index"] for a in (failed, lost, won)] == [0, 1, 2]
    assert won["url.full"] == f"{fast.url}/v1/chat/completions"
    # One trace; each upstream saw the traceparent of its own attempt span.
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    for span, name in zip(attempts, ("flaky", "slow", "fast"), strict=True):
        (headers,) = recorders[name].headers
        assert _traceparent_ids(headers["traceparent"]) == (
            root.context.trace_id,
            span.context.span_id,
        )


def test_a_cache_hit_is_a_lookup_and_a_replay_without_upstream_spans() -> None:
    with simulators(sim=SimConfig(output_tokens=4)) as sims:
        config = routed_config(sims, RoutingConfig(), cache=CacheConfig(backend="memory"))
        with traced_gateway(config) as (gateway, exporter):
            assert exporter is not None
            first = _post(gateway.url, chat_body("cache me"))
            wait_for_spans(exporter, ROOT)
            exporter.clear()
            second = _post(gateway.url, chat_body("cache me"))
            spans = wait_for_spans(exporter, ROOT)
    assert first.headers["x-hasten-cache"] == "miss" and second.headers["x-hasten-cache"] == "hit"
    (root,) = named(spans, ROOT)
    assert attrs(root)["hasten.cache"] == "hit"
    assert attrs(root)["gen_ai.usage.output_tokens"] == 4  # from the stored answer
    lookup, replay = children(spans, root)
    assert (lookup.name, replay.name) == ("cache.lookup", "cache.replay")
    assert attrs(lookup)["hasten.cache.is_hit"] is True
    assert not [span for span in spans if span.kind is SpanKind.CLIENT]


def test_a_coalesced_follower_waits_in_its_own_span_and_calls_no_upstream() -> None:
    with simulators(sim=SimConfig(ttft_base_ms=1500, output_tokens=3)) as sims:
        config = routed_config(sims, RoutingConfig(), cache=CacheConfig(backend="memory"))
        with traced_gateway(config) as (gateway, exporter):
            assert exporter is not None
            leader = threading.Thread(target=_post, args=(gateway.url, chat_body("share")))
            leader.start()
            deadline = time.monotonic() + 10
            while sim_stats(sims["sim"].url)["num_requests"] < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            follower = _post(gateway.url, chat_body("share"))
            leader.join(timeout=30)
            spans = wait_for_spans(exporter, ROOT, count=2)
    assert follower.status_code == 200 and sim_stats_total(spans) == 1
    roots = named(spans, ROOT)
    (waiter,) = [root for root in roots if attrs(root).get("hasten.coalesced")]
    names = [span.name for span in children(spans, waiter)]
    assert names == ["cache.lookup", "coalescing.wait"]
    (leading,) = [root for root in roots if root is not waiter]
    assert [span.name for span in children(spans, leading)] == ["cache.lookup", "upstream sim"]


def sim_stats_total(spans: list[Any]) -> int:
    """How many upstream attempts the traces show."""
    return sum(span.kind is SpanKind.CLIENT for span in spans)


def test_the_clients_traceparent_is_the_parent_and_upstream_gets_the_attempts() -> None:
    recorder = HeaderRecorder(build_app(SimConfig(output_tokens=2)))
    with ServerThread(recorder) as sim:
        config = routed_config({"sim": sim}, RoutingConfig())
        with traced_gateway(config) as (gateway, exporter):
            assert exporter is not None
            headers = {"traceparent": CLIENT_TRACEPARENT, "tracestate": "vendor=1"}
            response = _post(gateway.url, chat_body("traced"), **headers)
            spans = wait_for_spans(exporter, ROOT)
    assert response.status_code == 200
    (root,) = named(spans, ROOT)
    assert root.context.trace_id == int(CLIENT_TRACE_ID, 16)
    assert root.parent is not None and root.parent.span_id == int(CLIENT_SPAN_ID, 16)
    assert root.parent.is_remote
    (attempt,) = children(spans, root)
    (received,) = recorder.headers
    assert received["traceparent"] != CLIENT_TRACEPARENT
    assert _traceparent_ids(received["traceparent"]) == (
        int(CLIENT_TRACE_ID, 16),
        attempt.context.span_id,
    )
    assert received["tracestate"] == "vendor=1"  # the client's vendors' state travels on


def test_an_error_answer_marks_the_root_span_failed() -> None:
    with simulators(broken=SimConfig(error_rate=1.0)) as sims:
        config = routed_config(sims, RoutingConfig(), retry=RetryConfig(max_retries=0))
        with traced_gateway(config) as (gateway, exporter):
            assert exporter is not None
            response = _post(gateway.url, chat_body("fail"))
            spans = wait_for_spans(exporter, ROOT)
    assert response.status_code == 500
    (root,) = named(spans, ROOT)
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["http.response.status_code"] == 500


def test_with_tracing_off_the_clients_trace_headers_pass_through_unchanged() -> None:
    recorder = HeaderRecorder(build_app(SimConfig(output_tokens=2)))
    with ServerThread(recorder) as sim:
        config = routed_config({"sim": sim}, RoutingConfig())
        with traced_gateway(config, Tracing()) as (gateway, exporter):
            assert exporter is None
            headers = {"traceparent": CLIENT_TRACEPARENT, "tracestate": "vendor=1"}
            assert _post(gateway.url, chat_body("untraced"), **headers).status_code == 200
            assert _post(gateway.url, chat_body("no context")).status_code == 200
    with_context, without = recorder.headers
    assert with_context["traceparent"] == CLIENT_TRACEPARENT
    assert with_context["tracestate"] == "vendor=1"
    assert "traceparent" not in without and "tracestate" not in without


def test_tracing_off_never_imports_the_otel_module(tmp_path: Path) -> None:
    # A fresh interpreter: in this one, other tests have imported it already.
    code = (
        "import asyncio, sys\n"
        "from hasten.app import HastenApp\n"
        "from hasten.config import parse_config\n"
        "app = HastenApp(parse_config({}, {}))\n"
        "gateway = asyncio.run(app.startup())\n"
        "assert not gateway.tracing.is_enabled\n"
        "scope = {'type': 'http', 'headers': [], 'method': 'POST', 'path': '/v1/x'}\n"
        "assert gateway.tracing.start_request(scope, 'chat', 'r1') is not None\n"
        "print('hasten.telemetry.otel' in sys.modules)\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # (The redis client imports parts of OpenTelemetry by itself when it is installed.)
    assert result.stdout.strip() == "False"
    assert Tracing().start_request({"headers": []}, "chat", "r1") is NO_STAGE


async def test_the_semantic_lookup_span_holds_the_embedding(tmp_path: Path) -> None:
    tracing, exporter = in_memory_tracing()
    exact = build_cache("memory", l1_max_bytes=1 << 20)
    tier = SemanticTier(make_cache(tmp_path), exact)
    try:
        scope = {"type": "http", "headers": [], "method": "POST", "path": "/v1/chat/completions"}
        with tracing.start_request(scope, "chat", "r1") as root, root.child("semantic.lookup") as s:
            assert isinstance(s, SpanStage)
            hit = await tier.find(
                chat("what is the capital of France?"),
                model="gpt-x",
                tenant="t",
                max_age_s=None,
                trace=s,
            )
    finally:
        await tier.aclose()
        await exact.aclose()
    assert hit is None
    spans = list(exporter.get_finished_spans())
    (lookup,) = named(spans, "semantic.lookup")
    (embedding,) = children(spans, lookup)
    assert embedding.name == "embedding" and attrs(embedding)["hasten.embedder"] == "test/words"

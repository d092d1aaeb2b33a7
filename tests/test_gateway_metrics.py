"""GET /metrics after scripted traffic against real loopback simulators: exact values.

Each test sends a known sequence of requests, scrapes ``/metrics``, parses it with
prometheus_client's own parser and checks every counter it owns to the unit. Values the
client cannot know in advance (token counts, the time saved) are read from the answers it
got (their ``usage``, their ``x-hasten-saved-ms``), never assumed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families

from hasten.app import HastenApp
from hasten.config import (
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    TimeoutConfig,
    UpstreamConfig,
)
from hasten.config.metrics import MetricsConfig
from hasten.config.routing import DeploymentConfig, HedgeConfig, RoutingConfig
from hasten.config.semantic import SemanticConfig
from hasten.metrics.endpoint import MetricsApp
from hasten.simulator import SimConfig, build_app
from hasten.values.outcome import RequestOutcome
from tests.support.gateway import (
    FAST_RETRY,
    ScriptedUpstream,
    chat_body,
    make_config,
    running_gateway,
)
from tests.support.servers import ServerThread, free_port

ADMIN_KEY = "metrics-admin-key"
SIM_OUTPUT_TOKENS = 8
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    config = SimConfig(ttft_base_ms=5, decode_ms_per_token=1, output_tokens=SIM_OUTPUT_TOKENS)
    with ServerThread(build_app(config)) as server:
        yield server


def _post(gateway: ServerThread, body: object, **headers: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def _scrape(url: str, **headers: str) -> Samples:
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


# The per-request series carry the client API (all chat here, but where a test says).
_API_SERIES = (
    "hasten_requests_total",
    "hasten_gen_ai_",
    "hasten_gateway_overhead_seconds",
    "hasten_stream_inter_token_gap_seconds",
)


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample named ``name`` with exactly ``labels`` (and ``api="chat"`` for a
    per-request series that names none); 0 when absent."""
    if name.startswith(_API_SERIES) and "api" not in labels:
        labels = {**labels, "api": "chat"}
    return samples.get((name, frozenset(labels.items())), 0.0)


def _usage(response: httpx.Response) -> dict[str, int]:
    if response.headers["content-type"].startswith("text/event-stream"):
        for line in response.text.split("\n"):
            if line.startswith("data: {") and '"usage":{' in line:
                usage: dict[str, int] = orjson.loads(line[6:])["usage"]
                return usage
        raise AssertionError("no usage event")
    body: dict[str, Any] = response.json()
    return body["usage"]  # type: ignore[no-any-return]


def _num_events(response: httpx.Response) -> int:
    return sum(1 for line in response.text.split("\n") if line.startswith("data: "))


def test_exact_counters_after_a_scripted_sequence(sim: ServerThread) -> None:
    cache = CacheConfig(backend="memory", replay="paced", replay_chunk_interval_ms=1.0)
    config = make_config({"sim": sim.url + "/v1"}, cache=cache)
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    with running_gateway(config) as gateway:
        miss, hit = _post(gateway, chat_body("a")), _post(gateway, chat_body("a"))
        stream_miss = _post(gateway, chat_body("b", **stream))
        stream_hit = _post(gateway, chat_body("b", **stream))
        bypass = _post(gateway, {**chat_body("c"), "temperature": 0.7})
        invalid = _post(gateway, {"model": "sim-model"})
        not_found = httpx.get(f"{gateway.url}/nowhere", timeout=30)
        samples = _scrape(gateway.url)
    assert [r.headers["x-hasten-cache"] for r in (miss, hit, stream_miss, stream_hit, bypass)] == [
        "miss", "hit", "miss", "hit", "bypass",
    ]  # fmt: skip
    assert (invalid.status_code, not_found.status_code) == (400, 404)
    base = {"model": "*"}
    upstream = {**base, "deployment": "sim"}
    assert _value(samples, "hasten_requests_total", **upstream, cache="miss", status="200") == 2
    assert (
        _value(samples, "hasten_requests_total", **base, deployment="", cache="hit", status="200")
        == 2
    )
    assert _value(samples, "hasten_requests_total", **upstream, cache="bypass", status="200") == 1
    code = invalid.json()["error"]["code"]
    assert _value(samples, "hasten_errors_total", status="400", code=code) == 1
    assert _value(samples, "hasten_errors_total", status="404", code="unknown_url") == 1
    # Tokens: what the answers' usage said, by cache outcome.
    for cache_label, answers in (("miss", (miss, stream_miss)), ("hit", (hit, stream_hit))):
        labels = {
            **base,
            "deployment": "sim" if cache_label == "miss" else "",
            "cache": cache_label,
        }
        for token_type, field in (("input", "prompt_tokens"), ("output", "completion_tokens")):
            expected = sum(_usage(r)[field] for r in answers)
            got = _value(samples, "hasten_gen_ai_tokens_total", **labels, token_type=token_type)
            assert got == expected
            count = _value(
                samples, "hasten_gen_ai_client_token_usage_count", **labels, token_type=token_type
            )
            assert count == 2
    # One latency observation per request and outcome; the upstream's TTFB per call.
    for name in (
        "hasten_gen_ai_server_time_to_first_token_seconds_count",
        "hasten_gen_ai_server_request_duration_seconds_count",
        "hasten_gateway_overhead_seconds_count",
    ):
        assert _value(samples, name, **upstream, cache="miss") == 2
        assert _value(samples, name, **base, deployment="", cache="hit") == 2
        assert _value(samples, name, **upstream, cache="bypass") == 1
    assert _value(samples, "hasten_upstream_time_to_first_byte_seconds_count", **upstream) == 3
    # A paced replay sends one chunk per event: the gaps between them are exactly known.
    gaps = _value(
        samples, "hasten_stream_inter_token_gap_seconds_count", **base, deployment="", cache="hit"
    )
    assert gaps == _num_events(stream_hit) - 1
    assert (
        _value(samples, "hasten_stream_inter_token_gap_seconds_count", **upstream, cache="miss")
        >= 1
    )
    # The cache tiers' own counters, exported at scrape time.
    assert _value(samples, "hasten_cache_lookups_total", tier="l1") == 4
    assert _value(samples, "hasten_cache_hits_total", tier="l1") == 2
    assert _value(samples, "hasten_cache_stores_total", tier="l1") == 2
    assert _value(samples, "hasten_cache_entries", tier="l1") == 2
    assert _value(samples, "hasten_upstream_calls_total") == 3
    assert _value(samples, "hasten_upstream_calls_saved_total") == 2
    assert _value(samples, "hasten_coalesced_waiters_total") == 0
    # Time saved: each hit's header, summed, is the counter (to the header's rounding).
    saved_ms = [float(r.headers["x-hasten-saved-ms"]) for r in (hit, stream_hit)]
    assert "x-hasten-saved-ms" not in miss.headers and "x-hasten-saved-ms" not in bypass.headers
    counted_s = _value(samples, "hasten_latency_saved_seconds_total", model="*", source="hit")
    assert counted_s == pytest.approx(sum(saved_ms) / 1000.0, abs=1e-4)
    assert _value(samples, "hasten_upstream_in_flight", **upstream) == 0
    assert _value(samples, "hasten_breaker_state", **upstream, state="closed") == 1


def test_coalesced_waiters_are_counted_once_each() -> None:
    sim_config = SimConfig(ttft_base_ms=1500, output_tokens=4)  # a wide window to join
    with ServerThread(build_app(sim_config)) as slow:
        config = make_config({"sim": slow.url + "/v1"})
        with running_gateway(config) as gateway:
            _post(gateway, chat_body("warm-up"))  # the router's first TTFT estimate
            barrier = threading.Barrier(3)
            responses: list[httpx.Response] = []

            def send() -> None:
                barrier.wait()
                responses.append(_post(gateway, chat_body("together")))

            threads = [threading.Thread(target=send) for _ in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
            samples = _scrape(gateway.url)
    # A waiter's header says "coalesced", as the metrics do (issue 41); its leader "miss".
    labels = sorted(r.headers["x-hasten-cache"] for r in responses)
    assert labels == ["coalesced", "coalesced", "miss"]
    num_coalesced = 2
    base = {"model": "*", "deployment": "sim", "api": "chat"}
    assert _value(samples, "hasten_coalesced_waiters_total") == num_coalesced
    assert _value(samples, "hasten_requests_total", **base, cache="coalesced", status="200") == 2
    assert _value(samples, "hasten_requests_total", **base, cache="miss", status="200") == 2
    assert _value(samples, "hasten_upstream_calls_total") == 2
    assert _value(samples, "hasten_upstream_calls_saved_total") == num_coalesced
    # A waiter's saving is counted (the warm-up's TTFT is the estimate); it gets no header.
    assert all("x-hasten-saved-ms" not in r.headers for r in responses)
    assert _value(samples, "hasten_latency_saved_seconds_total", model="*", source="coalesced") >= 0
    assert (
        "hasten_latency_saved_seconds_total",
        frozenset({("model", "*"), ("source", "coalesced")}),
    ) in samples


@contextmanager
def _routed(**sims: SimConfig) -> Iterator[dict[str, ServerThread]]:
    with ExitStack() as stack:
        yield {n: stack.enter_context(ServerThread(build_app(c))) for n, c in sims.items()}


def _routed_config(
    urls: dict[str, str], routing: RoutingConfig, deployments: tuple[DeploymentConfig, ...]
) -> GatewayConfig:
    upstreams = {
        name: UpstreamConfig(name=name, url=url, timeouts=TimeoutConfig(), retry=FAST_RETRY)
        for name, url in urls.items()
    }
    route = ModelRoute(
        name="*",
        upstream=deployments[0].upstream,
        fallbacks=tuple(d.upstream for d in deployments[1:]),
        routing=replace(routing, deployments=deployments),
    )
    return GatewayConfig(
        upstreams=upstreams, models={"*": route}, cache=CacheConfig(is_enabled=False)
    )


def test_failovers_retries_and_hedges() -> None:
    hedge = HedgeConfig(
        is_enabled=True, min_delay_ms=50, max_delay_ms=300, min_samples=10_000, budget=1.0
    )
    with _routed(
        slow=SimConfig(ttft_base_ms=3000, output_tokens=3),
        fast=SimConfig(ttft_base_ms=20, output_tokens=3),
    ) as sims:
        dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        urls = {"dead": dead, "slow": sims["slow"].url + "/v1", "fast": sims["fast"].url + "/v1"}
        failing = _routed_config(
            urls, RoutingConfig(), (DeploymentConfig("dead"), DeploymentConfig("fast", priority=1))
        )
        with running_gateway(failing) as gateway:
            failed_over = _post(gateway, chat_body("x"))
            failover_samples = _scrape(gateway.url)
        hedging = _routed_config(
            urls,
            RoutingConfig(hedge=hedge),
            (DeploymentConfig("slow"), DeploymentConfig("fast", priority=1)),
        )
        with running_gateway(hedging) as gateway:
            hedged = _post(gateway, chat_body("hedge me", stream=True))
            hedge_samples = _scrape(gateway.url)
    # The router's own account of the call says what was tried, in order.
    tries = failed_over.headers["x-hasten-failover"].split(", ")
    assert failed_over.headers["x-hasten-upstream"] == "fast" and tries
    reasons: dict[str, int] = {}
    for attempt in tries:
        name, _, reason = attempt.rpartition("=")
        assert name == "dead"
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        labels = {"model": "*", "deployment": "dead", "reason": reason}
        assert _value(failover_samples, "hasten_failovers_total", **labels) == count
    # Every failure but the last one was retried on the same (dead) deployment.
    assert (
        _value(failover_samples, "hasten_retries_total", model="*", deployment="dead")
        == len(tries) - 1
    )
    assert hedged.headers["x-hasten-hedge"] == "won"
    for outcome, expected in (("fired", 1), ("won", 1), ("lost", 0), ("denied", 0)):
        assert _value(hedge_samples, "hasten_hedges_total", model="*", outcome=outcome) == expected


def test_openmetrics_is_chosen_by_the_accept_header(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        _post(gateway, chat_body("om"))
        accept = "application/openmetrics-text; version=1.0.0; charset=utf-8"
        om = httpx.get(f"{gateway.url}/metrics", headers={"accept": accept}, timeout=30)
        text = httpx.get(f"{gateway.url}/metrics", timeout=30)
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")
    families = {f.name: f for f in parse_om(om.text)}  # type: ignore[no-untyped-call]
    requests = families["hasten_requests"]
    assert requests.type == "counter"
    assert [s.value for s in requests.samples if s.name == "hasten_requests_total"] == [1]
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# EOF" not in text.text


def test_tenant_label_is_off_by_default_and_can_be_switched_on(sim: ServerThread) -> None:
    keys = [("team-a", "key-a"), ("team-b", "key-b")]
    base = make_config({"sim": sim.url + "/v1"}, api_keys=keys, admin_api_key=ADMIN_KEY)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    for is_tenant_label in (False, True):
        config = replace(base, metrics=MetricsConfig(is_tenant_label=is_tenant_label))
        with running_gateway(config) as gateway:
            _post(gateway, chat_body("t"), authorization="Bearer key-a")
            _post(gateway, chat_body("t"), authorization="Bearer key-b")
            samples = _scrape(gateway.url, **admin)
        labels = {"model": "*", "deployment": "sim", "cache": "miss", "status": "200"}
        if is_tenant_label:
            # Tenants have their own namespaces: both missed.
            assert _value(samples, "hasten_requests_total", **labels, tenant="team-a") == 1
            assert _value(samples, "hasten_requests_total", **labels, tenant="team-b") == 1
            assert _value(samples, "hasten_requests_total", **labels) == 0
        else:
            assert _value(samples, "hasten_requests_total", **labels) == 2
            assert not any(("tenant", "team-a") in key for _, key in samples)


def test_admin_key_guards_the_gateway_port_and_the_metrics_port_is_open(
    sim: ServerThread,
) -> None:
    config = make_config(
        {"sim": sim.url + "/v1"}, api_keys=[("team", "tenant-key")], admin_api_key=ADMIN_KEY
    )
    app = HastenApp(config)
    with ServerThread(app, lifespan="on") as gateway, ServerThread(MetricsApp(app)) as port:
        _post(gateway, chat_body("p"), authorization="Bearer tenant-key")
        url = f"{gateway.url}/metrics"
        assert httpx.get(url, timeout=30).status_code == 401
        tenant = httpx.get(url, headers={"authorization": "Bearer tenant-key"}, timeout=30)
        assert tenant.status_code == 403 and tenant.json()["error"]["type"] == "permission_error"
        from_gateway = _scrape(gateway.url, authorization=f"Bearer {ADMIN_KEY}")
        from_port = _scrape(port.url)  # no key on the separate port
        assert httpx.get(f"{port.url}/stats", timeout=30).status_code == 404
    labels = {"model": "*", "deployment": "sim", "cache": "miss", "status": "200"}
    assert _value(from_gateway, "hasten_requests_total", **labels) == 1
    assert _value(from_port, "hasten_requests_total", **labels) == 1
    # The admin's scrape and the refused ones are not model requests: only errors count them.
    assert _value(from_port, "hasten_errors_total", status="401", code="invalid_api_key") == 1


def test_metrics_off_serves_no_endpoint_and_no_header(sim: ServerThread) -> None:
    config = replace(make_config({"sim": sim.url + "/v1"}), metrics=MetricsConfig(is_enabled=False))
    with running_gateway(config) as gateway:
        _post(gateway, chat_body("off"))
        hit = _post(gateway, chat_body("off"))
        assert httpx.get(f"{gateway.url}/metrics", timeout=30).status_code == 404
    assert hit.headers["x-hasten-cache"] == "hit" and "x-hasten-saved-ms" not in hit.headers


class _EngineChild:
    """A stand-in engine child: a real loopback server answering ``/metrics`` like
    llama-server, and a supervisor status saying it is ready."""

    def __init__(self, url: str) -> None:
        self.url = url + "/v1"

    def status(self) -> dict[str, object]:
        return {"state": "ready", "restarts": 2}


LLAMA_SERVER_METRICS = b"""# HELP llamacpp:tokens_predicted_total Generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1234
llamacpp:requests_processing 3
llamacpp:requests_deferred 5
llamacpp:n_busy_slots_per_decode 2.5
llamacpp:requests_deferred_bogus x
"""


async def _metrics_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http" and scope["path"] == "/metrics"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain; version=0.0.4")],
        }
    )
    await send({"type": "http.response.body", "body": LLAMA_SERVER_METRICS})


def test_engine_child_stats_are_scraped_at_scrape_time(sim: ServerThread) -> None:
    with ServerThread(_metrics_app, lifespan="off") as child:
        app = HastenApp(make_config({"sim": sim.url + "/v1"}), engine=_EngineChild(child.url))
        with ServerThread(app, lifespan="on") as gateway:
            samples = _scrape(gateway.url)
    assert _value(samples, "hasten_engine_state", state="ready") == 1
    assert _value(samples, "hasten_engine_restarts_total") == 2
    assert _value(samples, "hasten_engine_queue_depth") == 5
    assert _value(samples, "hasten_engine_running_sequences") == 3
    assert _value(samples, "hasten_engine_decoded_tokens_total") == 1234


def test_an_error_ending_a_stream_is_counted_with_its_code() -> None:
    cut = SimConfig(disconnect_rate=1.0, output_tokens=20, decode_ms_per_token=1)
    with (
        ServerThread(build_app(cut)) as sim,
        running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway,
    ):
        response = _post(gateway, chat_body("cut", stream=True))
        samples = _scrape(gateway.url)
    events = [line for line in response.text.split("\n") if line.startswith('data: {"error"')]
    assert response.status_code == 200 and len(events) == 1
    code = orjson.loads(events[0][6:])["error"]["code"]
    labels = {"model": "*", "deployment": "sim", "cache": "miss", "status": "200"}
    assert _value(samples, "hasten_requests_total", **labels) == 1
    assert _value(samples, "hasten_errors_total", status="200", code=code) == 1


def _wait_indexed(gateway: ServerThread, num_entries: int) -> None:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    for _ in range(500):
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=headers, timeout=30).json()
        if stats["semantic"]["entries"] >= num_entries:
            return
        time.sleep(0.02)
    raise AssertionError(f"semantic index never reached {num_entries} entries")


def test_semantic_tier_families_with_the_openai_sdk(sim: ServerThread, tmp_path: Path) -> None:
    config = make_config(
        {"sim": sim.url + "/v1"}, cache=CacheConfig(backend="memory"), admin_api_key=ADMIN_KEY
    )
    # The cosine cut-off these two questions were chosen for: the calibrated default
    # (target_precision) serves paraphrases far more rarely; this test is about the families.
    semantic = SemanticConfig(
        is_enabled=True, path=str(tmp_path / "semantic.sqlite3"), min_similarity=0.96
    )
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    with running_gateway(replace(config, semantic=semantic)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)

        def ask(text: str) -> Any:
            return client.chat.completions.with_raw_response.create(
                model="sim-model", messages=[{"role": "user", "content": text}], temperature=0
            )

        first = ask("What is the capital of France?")
        _wait_indexed(gateway, 1)
        paraphrase = ask("Which city is the capital of France?")
        entry_id = int(paraphrase.headers["x-hasten-semantic-entry"])
        report = httpx.post(
            f"{gateway.url}/admin/cache/report",
            json={"entry_id": entry_id, "similarity": 0.99},
            headers=admin,
            timeout=30,
        )
        samples = _scrape(gateway.url, **admin)
    assert first.headers["x-hasten-cache"] == "miss" and report.status_code == 200
    assert paraphrase.headers["x-hasten-cache"] == "semantic"
    labels = {"model": "*", "deployment": "", "cache": "semantic", "status": "200"}
    assert _value(samples, "hasten_requests_total", **labels) == 1
    # Both requests missed the exact tier and asked the semantic one.
    assert _value(samples, "hasten_semantic_lookup_seconds_count", model="*") == 2
    assert _value(samples, "hasten_cache_lookups_total", tier="semantic") == 2
    assert _value(samples, "hasten_cache_hits_total", tier="semantic") == 1
    assert _value(samples, "hasten_cache_stores_total", tier="semantic") == 1
    assert _value(samples, "hasten_semantic_false_hit_reports_total") == 1
    saved_s = float(paraphrase.headers["x-hasten-saved-ms"]) / 1000.0
    counted_s = _value(samples, "hasten_latency_saved_seconds_total", model="*", source="semantic")
    assert counted_s == pytest.approx(saved_s, abs=1e-4)


def test_observers_get_one_outcome_per_request_and_a_failing_one_is_contained(
    sim: ServerThread,
) -> None:
    app = HastenApp(make_config({"sim": sim.url + "/v1"}))
    outcomes: list[RequestOutcome] = []

    def broken(outcome: RequestOutcome) -> None:
        raise RuntimeError("observer bug")

    with ServerThread(app, lifespan="on") as gateway:
        assert app.gateway is not None
        app.gateway.observers[:0] = [broken, outcomes.append]
        miss = _post(gateway, chat_body("seam", stream=True))
        hit = _post(gateway, chat_body("seam", stream=True))
        _post(gateway, {"model": "sim-model"})  # refused before the proxy: no outcome
        samples = _scrape(gateway.url)
    assert miss.status_code == hit.status_code == 200
    assert [o.cache for o in outcomes] == ["miss", "hit"]
    first, second = outcomes
    assert first.request_id == miss.headers["x-hasten-request-id"]
    assert (first.deployment, second.deployment) == ("sim", None)
    assert first.is_upstream_call and not second.is_upstream_call
    assert first.upstream_ttfb_s is not None and second.upstream_ttfb_s is None
    for o in outcomes:
        assert o.status == 200 and o.error_code is None and o.is_stream
        assert o.ttft_s is not None and 0 <= o.ttft_s <= o.e2e_s
        # The client asked for no usage, but hasten did (to store the stream): it is known.
        assert o.tokens_out == SIM_OUTPUT_TOKENS and o.tenant and o.ended_at > 0
    assert first.num_gaps == len(first.gaps_s) and first.gap_max_s <= first.gap_sum_s + 1e-12
    assert second.saved_s is not None and second.saved_s >= 0
    # The failing observer ran first, and the metrics (after it) still counted both.
    labels = {"model": "*", "deployment": "sim", "cache": "miss", "status": "200"}
    assert _value(samples, "hasten_requests_total", **labels) == 1


def _wait_written(gateway: ServerThread) -> None:
    """Until the background L2 write is done (``/stats`` shows none pending)."""
    for _ in range(500):
        stats = httpx.get(f"{gateway.url}/stats", timeout=30).json()
        if stats["cache"]["pending_writes"] == 0:
            return
        time.sleep(0.01)
    raise AssertionError("the L2 write never finished")


def test_l2_lookups_and_hits_after_a_restart(sim: ServerThread, tmp_path: Path) -> None:
    cache = CacheConfig(backend="sqlite", sqlite_path=str(tmp_path / "exact.sqlite3"))
    config = make_config({"sim": sim.url + "/v1"}, cache=cache)
    with running_gateway(config) as gateway:
        assert _post(gateway, chat_body("kept")).headers["x-hasten-cache"] == "miss"
        _wait_written(gateway)
        before = _scrape(gateway.url)
    with running_gateway(config) as gateway:  # L1 starts empty; L2 has the answer
        assert _post(gateway, chat_body("kept")).headers["x-hasten-cache"] == "hit"
        assert _post(gateway, chat_body("kept")).headers["x-hasten-cache"] == "hit"
        after = _scrape(gateway.url)
    assert _value(before, "hasten_cache_lookups_total", tier="l2") == 1
    assert _value(before, "hasten_cache_hits_total", tier="l2") == 0
    assert _value(before, "hasten_cache_stores_total", tier="l2") == 1
    # The first hit came from L2 (and was promoted); the second from L1.
    assert _value(after, "hasten_cache_lookups_total", tier="l1") == 2
    assert _value(after, "hasten_cache_lookups_total", tier="l2") == 1
    assert _value(after, "hasten_cache_hits_total", tier="l2") == 1
    assert _value(after, "hasten_cache_hits_total", tier="l1") == 1


def test_upstream_errors_passed_through_are_counted() -> None:
    upstream = ScriptedUpstream([(400, {}, {"error": {"message": "bad", "code": "nope"}})])
    with ServerThread(upstream) as scripted:
        with running_gateway(make_config({"up": scripted.url + "/v1"})) as gateway:
            response = _post(gateway, chat_body("e"))
            samples = _scrape(gateway.url)
    assert response.status_code == 400
    labels = {"model": "*", "deployment": "up", "cache": "miss", "status": "400"}
    assert _value(samples, "hasten_requests_total", **labels) == 1
    assert _value(samples, "hasten_errors_total", status="400", code="") == 1


def test_a_winning_hedge_saves_the_primarys_expected_residual() -> None:
    hedge = HedgeConfig(
        is_enabled=True, min_delay_ms=50, max_delay_ms=300, min_samples=10_000, budget=1.0
    )
    with _routed(
        slow=SimConfig(ttft_base_ms=2000, output_tokens=3),
        fast=SimConfig(ttft_base_ms=20, output_tokens=3),
    ) as sims:
        urls = {name: sim.url + "/v1" for name, sim in sims.items()}
        deployments = (DeploymentConfig("slow"), DeploymentConfig("fast", priority=1))
        config = _routed_config(urls, RoutingConfig(hedge=hedge), deployments)
        with running_gateway(config) as gateway:
            # Never hedged: the primary answers, so its TTFT window holds one slow sample.
            once = _post(gateway, chat_body("once", stream=True), **{"x-hasten-idempotent": "0"})
            hedged = _post(gateway, chat_body("hedge me", stream=True))
            samples = _scrape(gateway.url)
    assert once.headers["x-hasten-upstream"] == "slow" and "x-hasten-saved-ms" not in once.headers
    assert hedged.headers["x-hasten-hedge"] == "won"
    assert "x-hasten-primary" not in hedged.headers  # internal to the saving's estimate
    saved_ms = float(hedged.headers["x-hasten-saved-ms"])
    # Abandoned after ~the 300 ms delay, the primary's 2 s sample was still far off.
    assert 0 < saved_ms < 2000
    counted_s = _value(samples, "hasten_latency_saved_seconds_total", model="*", source="hedge")
    assert counted_s == pytest.approx(saved_ms / 1000.0, abs=1e-4)

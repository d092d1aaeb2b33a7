"""Scrape-time export of the counters and gauges other objects already keep.

The cache tiers, the routing pools (deployments, breakers, hedge budgets), the semantic
store, the pipeline's ``stats`` and the engine child count on their own; counting the same events
again on the request path would cost twice for nothing. This collector reads them when
Prometheus scrapes, so their cost is paid per scrape, not per request.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from hasten.metrics.families import CounterFamily, HistogramFamily, export_all

if TYPE_CHECKING:
    from hasten.proxy.pipeline import Pipeline

BREAKER_STATES = ("closed", "open", "half_open")


class Counted(Protocol):
    """What the per-request observer counted (``hasten.metrics.registry.Metrics``)."""

    @property
    def families(self) -> tuple[HistogramFamily | CounterFamily, ...]: ...

    @property
    def hedges(self) -> Counter[tuple[str, str]]: ...


@dataclass(slots=True)
class EngineSample:
    """The engine child as last scraped (``hasten.metrics.engine``)."""

    state: str = ""  # the supervisor's, e.g. "ready", "restarting (2)"
    num_restarts: int = 0
    stats: Mapping[str, Any] = field(default_factory=dict)  # from the child's /metrics


class GatewayCollector(Collector):
    """Everything the request path and its parts already count, as metric families, read
    at scrape time."""

    def __init__(self, pipeline: Pipeline, metrics: Counted) -> None:
        self._pipeline = pipeline
        self._metrics = metrics
        self.engine: EngineSample | None = None  # set by the scrape before collecting

    def collect(self) -> Iterator[Metric]:
        yield from export_all(self._metrics.families)
        yield from self._requests()
        yield from self._cache()
        yield from self._routing(time.monotonic())
        if self.engine is not None:
            yield from _engine(self.engine)

    def _requests(self) -> Iterator[Metric]:
        counts = self._pipeline.stats.counts
        yield _counter(
            "hasten_coalesced_waiters", "Requests that joined an identical request's call",
            counts["coalesced"],
        )  # fmt: skip
        saved = counts["hit"] + counts["semantic_hit"] + counts["coalesced"]
        yield _counter(
            "hasten_upstream_calls_saved", "Requests answered without an upstream call of "
            "their own (exact hits, semantic hits, coalesced waiters)", saved,
        )  # fmt: skip
        yield _counter(
            "hasten_upstream_calls", "Upstream calls opened for client requests",
            counts["upstream_calls"],
        )  # fmt: skip
        yield _gauge(
            "hasten_coalescer_flights", "Upstream calls in flight that requests can join",
            len(self._pipeline.coalescer),
        )  # fmt: skip

    def _cache(self) -> Iterator[Metric]:
        lookups = _tiers("hasten_cache_lookups", "Cache lookups by tier")
        hits = _tiers("hasten_cache_hits", "Cache hits by tier")
        stores = _tiers("hasten_cache_stores", "Answers stored, by tier")
        evictions = _tiers("hasten_cache_evictions", "Entries evicted (or expired), by tier")
        entries = GaugeMetricFamily("hasten_cache_entries", "Entries held", labels=["tier"])
        reports = 0
        cache = self._pipeline.cache
        if cache is not None:
            s = cache.stats()
            lookups.add_metric(["l1"], s["l1_hits"] + s["l2_hits"] + s["misses"])
            hits.add_metric(["l1"], s["l1_hits"])
            stores.add_metric(["l1"], s["writes"])
            evictions.add_metric(["l1"], s["l1_evictions"])
            entries.add_metric(["l1"], s["l1_entries"])
            if cache.l2 is not None:
                lookups.add_metric(["l2"], s["l2_lookups"])
                hits.add_metric(["l2"], s["l2_hits"])
                l2_failed = s["write_errors"] + s["writes_dropped"] + s["pending_writes"]
                stores.add_metric(["l2"], max(0, s["writes"] - l2_failed))
        semantic = self._pipeline.semantic
        if semantic is not None:
            counters = semantic.cache.counters
            lookups.add_metric(["semantic"], sum(v for k, v in counters.items() if _is_lookup(k)))
            hits.add_metric(["semantic"], counters["hits"])
            stores.add_metric(["semantic"], counters["inserts"])
            evictions.add_metric(["semantic"], counters["evicted"] + counters["expired"])
            reports = counters["reported_wrong"]
        yield from (lookups, hits, stores, evictions, entries)
        yield _counter(
            "hasten_semantic_false_hit_reports", "Semantic hits reported wrong "
            "(POST /admin/cache/report)", reports,
        )  # fmt: skip

    def _routing(self, now_s: float) -> Iterator[Metric]:
        in_flight = GaugeMetricFamily(
            "hasten_upstream_in_flight", "Upstream attempts in flight, per deployment",
            labels=["model", "deployment"],
        )  # fmt: skip
        breaker = GaugeMetricFamily(
            "hasten_breaker_state", "1 for the state each deployment's breaker is in",
            labels=["model", "deployment", "state"],
        )  # fmt: skip
        trips = CounterMetricFamily(
            "hasten_breaker_trips", "Times a breaker opened", labels=["model", "deployment"]
        )
        budget = GaugeMetricFamily(
            "hasten_hedge_budget_remaining", "Hedges the budget still allows in its window",
            labels=["model"],
        )  # fmt: skip
        hedges = CounterMetricFamily(
            "hasten_hedges", "Hedges fired, won (the hedge answered first), lost (the "
            "primary did) and denied (no budget left)", labels=["model", "outcome"],
        )  # fmt: skip
        busy = CounterMetricFamily(
            "hasten_upstream_busy_refusals", "Attempts refused before sending because the "
            "upstream was at its max_in_flight", labels=["upstream"],
        )  # fmt: skip
        outcomes = self._metrics.hedges
        client = self._pipeline.client
        for upstream, gate in client.gates.items():
            busy.add_metric([upstream], gate.num_refused)
        for model, pool in client.pools().items():
            for name, d in pool.deployments.items():
                in_flight.add_metric([model, name], d.num_in_flight)
                state = d.breaker.state(now_s).value
                for known in BREAKER_STATES:
                    breaker.add_metric([model, name, known], 1.0 if state == known else 0.0)
                trips.add_metric([model, name], d.breaker.num_trips_total)
            budget.add_metric([model], pool.budget.remaining(now_s))
            hedges.add_metric([model, "fired"], pool.num_hedges)
            hedges.add_metric([model, "won"], outcomes[(model, "won")])
            hedges.add_metric([model, "lost"], outcomes[(model, "lost")])
            hedges.add_metric([model, "denied"], pool.budget.num_denied)
        yield from (in_flight, breaker, trips, budget, hedges, busy)


def _engine(sample: EngineSample) -> Iterator[Metric]:
    state = GaugeMetricFamily(
        "hasten_engine_state", "1 for the local engine child's state", labels=["state"]
    )
    # "restarting (3)" and "failed: why" are one state each, not one series per variant.
    state.add_metric([sample.state.split(" ")[0].rstrip(":") or "unknown"], 1.0)
    yield state
    yield _counter("hasten_engine_restarts", "Engine child restarts", sample.num_restarts)
    stats = sample.stats
    for key, name, text in (
        ("num_waiting", "hasten_engine_queue_depth", "Requests waiting for a sequence slot"),
        ("num_running", "hasten_engine_running_sequences", "Sequences being decoded"),
    ):
        if isinstance(stats.get(key), int):
            yield _gauge(name, text, stats[key])
    if isinstance(stats.get("num_decoded_tokens"), int):
        yield _counter(
            "hasten_engine_decoded_tokens", "Tokens decoded by the engine child (since its "
            "last start)", stats["num_decoded_tokens"],
        )  # fmt: skip


def _is_lookup(name: str) -> bool:
    return name.startswith("lookup_")


def _tiers(name: str, text: str) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, labels=["tier"])


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)

"""``Metrics``: the Prometheus families observed once per request, with cached children.

Per request, ``observe`` does one dict lookup for the request's label tuple and a few
histogram and counter updates on children created the first time that tuple was seen
(``.labels()`` is not cheap: it takes a lock and builds a tuple every call). Counters that
other objects already keep (cache tiers, pools, breakers, the semantic store, the engine)
are not counted again here: ``hasten.metrics.collector`` reads them at scrape time.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter

from hasten.metrics.outcome import COALESCED, HIT, SEMANTIC, RequestOutcome
from hasten.metrics.saved import PoolSource, SavedTime

if TYPE_CHECKING:
    from hasten.metrics.endpoint import Scrape

# Seconds: from a sub-millisecond cache hit to a long generation.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
)  # fmt: skip
OVERHEAD_BUCKETS_S = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
GAP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# OpenTelemetry's advice for gen_ai.client.token.usage.
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
SAVED_SOURCES = ("hit", "semantic", "coalesced", "hedge")


@dataclass(slots=True)
class GapCounts:
    """One label tuple's inter-token gap histogram, kept by hand: a stream has many gaps,
    and a bisect and an increment each cost far less than ``Histogram.observe``."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(GAP_BUCKETS_S) + 1))
    sum_s: float = 0.0
    count: int = 0


@dataclass(slots=True)
class _Series:
    """The children of one (model, deployment, cache[, tenant]) label tuple."""

    labels: tuple[str, ...]
    ttft: Histogram
    e2e: Histogram
    gateway: Histogram
    tokens_in: Histogram
    tokens_out: Histogram
    tokens_in_total: PromCounter
    tokens_out_total: PromCounter
    gaps: GapCounts
    requests: dict[int, PromCounter] = field(default_factory=dict)  # by status


class Metrics:
    """The gateway's metric families and their observer; built once at startup."""

    def __init__(self, pools: PoolSource, *, is_tenant_label: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.is_tenant_label = is_tenant_label
        self.saved = SavedTime(pools)
        self.scrape: Scrape | None = None  # set by endpoint.build_metrics
        self._series: dict[tuple[str, ...], _Series] = {}
        self._counters: dict[tuple[str, ...], PromCounter] = {}
        self._histograms: dict[tuple[str, ...], Histogram] = {}
        self.gaps: dict[tuple[str, ...], GapCounts] = {}  # exported by the collector
        self.hedges: Counter[tuple[str, str]] = Counter()  # (model, won|lost) outcomes
        tenant = ("tenant",) if is_tenant_label else ()
        base = ("model", "deployment", "cache", *tenant)
        self.base_labels = base
        r = self.registry
        self._ttft = Histogram(
            "hasten_gen_ai_server_time_to_first_token_seconds",
            "Time to the first body byte of the answer, as the client saw it",
            base, registry=r, buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self._e2e = Histogram(
            "hasten_gen_ai_server_request_duration_seconds",
            "Time to the last byte of the answer, as the client saw it",
            base, registry=r, buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self._gateway = Histogram(
            "hasten_gateway_overhead_seconds",
            "hasten's own time: to the response start, less the upstream's time to first byte",
            base, registry=r, buckets=OVERHEAD_BUCKETS_S,
        )  # fmt: skip
        self._ttfb = Histogram(
            "hasten_upstream_time_to_first_byte_seconds",
            "The upstream's time to first byte (the winning attempt, from the call's start)",
            ("model", "deployment", *tenant), registry=r, buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self._semantic = Histogram(
            "hasten_semantic_lookup_seconds",
            "A semantic-tier lookup: embedding the question and searching",
            ("model", *tenant), registry=r, buckets=LATENCY_BUCKETS_S,
        )  # fmt: skip
        self._token_usage = Histogram(
            "hasten_gen_ai_client_token_usage",
            "Tokens per answer, by token type (input, output), from the answer's usage",
            (*base, "token_type"), registry=r, buckets=TOKEN_BUCKETS,
        )  # fmt: skip
        self._tokens = PromCounter(
            "hasten_gen_ai_tokens", "Tokens in answers, by token type (input, output)",
            (*base, "token_type"), registry=r,
        )  # fmt: skip
        self._requests = PromCounter(
            "hasten_requests", "Completion and embeddings requests answered, by status",
            (*base, "status"), registry=r,
        )  # fmt: skip
        self._errors = PromCounter(
            "hasten_errors", "Error answers (and errors ending a stream), by status and code",
            ("status", "code"), registry=r,
        )  # fmt: skip
        self._saved = PromCounter(
            "hasten_latency_saved_seconds",
            "Estimated upstream latency avoided (hasten.metrics.saved), by source",
            ("model", "source", *tenant), registry=r,
        )  # fmt: skip
        self._failovers = PromCounter(
            "hasten_failovers", "Failed upstream attempts followed by another, by reason",
            ("model", "deployment", "reason"), registry=r,
        )  # fmt: skip
        self._retries = PromCounter(
            "hasten_retries", "Attempts that retried the deployment that had just failed",
            ("model", "deployment"), registry=r,
        )  # fmt: skip

    # --- the per-request observation -------------------------------------------------

    def __call__(self, outcome: RequestOutcome) -> None:
        """The observer: one request's every measurement."""
        key: tuple[str, ...] = (outcome.model, outcome.deployment or "", outcome.cache)
        if self.is_tenant_label:
            key = (*key, outcome.tenant)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series(key)
        status = outcome.status
        requests = series.requests.get(status)
        if requests is None:
            requests = series.requests[status] = self._requests.labels(*key, str(status))
        requests.inc()
        if outcome.ttft_s is not None:
            series.ttft.observe(outcome.ttft_s)
        series.e2e.observe(outcome.e2e_s)
        series.gateway.observe(outcome.gateway_s)
        if outcome.gaps_s:
            _count_gaps(series.gaps, outcome.gaps_s)
        if outcome.tokens_in is not None:
            series.tokens_in.observe(outcome.tokens_in)
            series.tokens_in_total.inc(outcome.tokens_in)
        if outcome.tokens_out is not None:
            series.tokens_out.observe(outcome.tokens_out)
            series.tokens_out_total.inc(outcome.tokens_out)
        if outcome.error_code is not None:
            self.count_error(status, outcome.error_code)
        if outcome.is_upstream_call:
            self._observe_upstream(outcome)
        if outcome.semantic_s is not None:
            self._histogram(self._semantic, outcome.model, *key[3:]).observe(outcome.semantic_s)
        if outcome.saved_s is not None:
            source = _saved_source(outcome)
            self._counter(self._saved, outcome.model, source, *key[3:]).inc(outcome.saved_s)

    def _observe_upstream(self, outcome: RequestOutcome) -> None:
        tenant = (outcome.tenant,) if self.is_tenant_label else ()
        if outcome.upstream_ttfb_s is not None and outcome.deployment:
            child = self._histogram(self._ttfb, outcome.model, outcome.deployment, *tenant)
            child.observe(outcome.upstream_ttfb_s)
        if outcome.hedge in ("won", "lost"):
            self.hedges[(outcome.model, outcome.hedge)] += 1
        if outcome.failovers:
            _count_failovers(self, outcome)

    def count_error(self, status: int, code: str | None) -> None:
        """One error answer; also called by the app for errors before the proxy."""
        self._counter(self._errors, str(status), code or "").inc()

    def count_failover(self, model: str, deployment: str, reason: str) -> None:
        self._counter(self._failovers, model, deployment, reason).inc()

    def count_retry(self, model: str, deployment: str) -> None:
        self._counter(self._retries, model, deployment).inc()

    # --- children ----------------------------------------------------------------------

    def _new_series(self, key: tuple[str, ...]) -> _Series:
        gaps = self.gaps.setdefault(key, GapCounts())
        return _Series(
            labels=key,
            ttft=self._ttft.labels(*key),
            e2e=self._e2e.labels(*key),
            gateway=self._gateway.labels(*key),
            tokens_in=self._token_usage.labels(*key, "input"),
            tokens_out=self._token_usage.labels(*key, "output"),
            tokens_in_total=self._tokens.labels(*key, "input"),
            tokens_out_total=self._tokens.labels(*key, "output"),
            gaps=gaps,
        )

    def _counter(self, family: PromCounter, *values: str) -> PromCounter:
        key = (family._name, *values)
        child = self._counters.get(key)
        if child is None:
            child = self._counters[key] = family.labels(*values)
        return child

    def _histogram(self, family: Histogram, *values: str) -> Histogram:
        key = (family._name, *values)
        child = self._histograms.get(key)
        if child is None:
            child = self._histograms[key] = family.labels(*values)
        return child


def _count_gaps(gaps: GapCounts, gaps_s: list[float]) -> None:
    buckets = gaps.buckets
    for gap_s in gaps_s:
        buckets[bisect.bisect_left(GAP_BUCKETS_S, gap_s)] += 1
    gaps.sum_s += sum(gaps_s)
    gaps.count += len(gaps_s)


def _count_failovers(metrics: Metrics, outcome: RequestOutcome) -> None:
    """Each failed attempt by reason; one followed by a try on the same deployment is a
    retry (the attempts in order are the failures, then the winner)."""
    names = []
    for failover in outcome.failovers:
        name, _, reason = failover.rpartition("=")
        names.append(name)
        metrics.count_failover(outcome.model, name, reason)
    names.append(outcome.deployment or "")
    for earlier, later in itertools.pairwise(names):
        if earlier == later:
            metrics.count_retry(outcome.model, later)


def _saved_source(outcome: RequestOutcome) -> str:
    if outcome.cache in (HIT, SEMANTIC, COALESCED):
        return outcome.cache
    return "hedge"

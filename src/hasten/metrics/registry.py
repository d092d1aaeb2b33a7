"""``Metrics``: the families observed once per request, with cached children.

Per request, the observer does one dict lookup for the request's label tuple and a few
bucket and counter bumps on children created the first time that tuple was seen (the
families are ``hasten.metrics.families``: no lock, no ``.labels()`` call per request).
Counters that other objects already keep (cache tiers, pools, breakers, the semantic
store, the engine) are not counted again here: ``hasten.metrics.collector`` reads them at
scrape time, and exports these families too.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry

from hasten.metrics.families import CounterChild, CounterFamily, HistogramChild, HistogramFamily
from hasten.metrics.saved import PoolSource, SavedTime
from hasten.values.outcome import COALESCED, HIT, SEMANTIC, RequestOutcome

if TYPE_CHECKING:
    from hasten.metrics.collector import EngineSample


class EngineScrape(Protocol):
    """What a scrape fetches before collecting (``hasten.metrics.endpoint.Scrape``)."""

    async def sample_engine(self) -> None: ...

    @property
    def engine(self) -> EngineSample | None:
        """The engine child as last sampled; None before (or without a child)."""


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


@dataclass(slots=True)
class _Series:
    """The children of one (model, deployment, cache[, tenant]) label tuple."""

    ttft: HistogramChild
    e2e: HistogramChild
    gateway: HistogramChild
    gaps: HistogramChild
    tokens_in: HistogramChild
    tokens_out: HistogramChild
    tokens_in_total: CounterChild
    tokens_out_total: CounterChild
    tokens_cached_total: CounterChild  # input tokens the provider's prompt cache served
    requests: dict[int, CounterChild] = field(default_factory=dict)  # by status


class Metrics:
    """The gateway's metric families and their observer; built once at startup."""

    def __init__(self, pools: PoolSource, *, is_tenant_label: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.is_tenant_label = is_tenant_label
        self.saved = SavedTime(pools)
        self.scrape: EngineScrape | None = None  # set by endpoint.build_metrics
        self._series: dict[tuple[str, ...], _Series] = {}
        self.hedges: Counter[tuple[str, str]] = Counter()  # (model, won|lost) outcomes
        tenant = ("tenant",) if is_tenant_label else ()
        # ``api``: the client API the request came in (chat, completions, embeddings,
        # responses, messages).
        base = ("model", "deployment", "cache", "api", *tenant)
        (
            self.ttft,
            self.e2e,
            self.gateway,
            self.gaps,
            self.ttfb,
            self.semantic,
            self.token_usage,
        ) = _histograms(base, tenant)
        (
            self.tokens,
            self.requests,
            self.errors,
            self.saved_total,
            self.failovers,
            self.retries,
            self.resumes,
        ) = _counters(base, tenant)
        self.families: tuple[HistogramFamily | CounterFamily, ...] = (
            self.ttft, self.e2e, self.gateway, self.gaps, self.ttfb, self.semantic,
            self.token_usage, self.tokens, self.requests, self.errors, self.saved_total,
            self.failovers, self.retries, self.resumes,
        )  # fmt: skip

    # --- the per-request observation -------------------------------------------------

    def __call__(self, outcome: RequestOutcome) -> None:
        """The observer: one request's every measurement."""
        key: tuple[str, ...] = (
            outcome.model,
            outcome.deployment or "",
            outcome.cache,
            outcome.endpoint,
        )
        if self.is_tenant_label:
            key = (*key, outcome.tenant)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series(key)
        status = outcome.status
        requests = series.requests.get(status)
        if requests is None:
            requests = series.requests[status] = self.requests.child(*key, str(status))
        requests.value += 1
        if outcome.ttft_s is not None:
            series.ttft.observe(outcome.ttft_s)
        series.e2e.observe(outcome.e2e_s)
        series.gateway.observe(outcome.gateway_s)
        if outcome.gaps_s:
            series.gaps.observe_many(outcome.gaps_s)
        if outcome.tokens_in is not None:
            series.tokens_in.observe(outcome.tokens_in)
            series.tokens_in_total.value += outcome.tokens_in
        if outcome.tokens_out is not None:
            series.tokens_out.observe(outcome.tokens_out)
            series.tokens_out_total.value += outcome.tokens_out
        if outcome.tokens_cached:
            series.tokens_cached_total.value += outcome.tokens_cached
        if outcome.error_code is not None or status >= 400:
            self.count_error(status, outcome.error_code)
        if outcome.is_upstream_call:
            self._observe_upstream(outcome, key[4:])
        if outcome.semantic_s is not None:
            self.semantic.child(outcome.model, *key[4:]).observe(outcome.semantic_s)
        if outcome.saved_s is not None:
            source = _saved_source(outcome)
            self.saved_total.child(outcome.model, source, *key[4:]).inc(outcome.saved_s)

    def _observe_upstream(self, outcome: RequestOutcome, tenant: tuple[str, ...]) -> None:
        if outcome.upstream_ttfb_s is not None and outcome.deployment:
            child = self.ttfb.child(outcome.model, outcome.deployment, *tenant)
            child.observe(outcome.upstream_ttfb_s)
        if outcome.hedge in ("won", "lost"):
            self.hedges[(outcome.model, outcome.hedge)] += 1
        if outcome.failovers:
            _count_failovers(self, outcome)
        if outcome.resume:
            self.resumes.child(outcome.model, outcome.resume).inc()

    def count_error(self, status: int, code: str | None) -> None:
        """One error answer; also called by the app for errors before the proxy."""
        self.errors.child(str(status), code or "").inc()

    def _new_series(self, key: tuple[str, ...]) -> _Series:
        return _Series(
            ttft=self.ttft.child(*key),
            e2e=self.e2e.child(*key),
            gateway=self.gateway.child(*key),
            gaps=self.gaps.child(*key),
            tokens_in=self.token_usage.child(*key, "input"),
            tokens_out=self.token_usage.child(*key, "output"),
            tokens_in_total=self.tokens.child(*key, "input"),
            tokens_out_total=self.tokens.child(*key, "output"),
            tokens_cached_total=self.tokens.child(*key, "cached_input"),
        )


def _histograms(base: tuple[str, ...], tenant: tuple[str, ...]) -> tuple[HistogramFamily, ...]:
    """The per-request histograms, in the order ``Metrics`` unpacks them."""
    return (
        HistogramFamily(
            "hasten_gen_ai_server_time_to_first_token_seconds",
            "Time to the first body byte of the answer, as the client saw it",
            base,
            LATENCY_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_gen_ai_server_request_duration_seconds",
            "Time to the last byte of the answer, as the client saw it",
            base,
            LATENCY_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_gateway_overhead_seconds",
            "hasten's own time: to the response start, less the upstream's time to first byte",
            base,
            OVERHEAD_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_stream_inter_token_gap_seconds",
            "Gaps between consecutive stream chunks sent to the client (one token each "
            "with OpenAI-style upstreams)",
            base,
            GAP_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_upstream_time_to_first_byte_seconds",
            "The upstream's time to first byte (the winning attempt, from the call's start)",
            ("model", "deployment", *tenant),
            LATENCY_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_semantic_lookup_seconds",
            "A semantic-tier lookup: embedding the question and searching (or, where only "
            "a repeat is served, reading it by its text)",
            ("model", *tenant),
            LATENCY_BUCKETS_S,
        ),
        HistogramFamily(
            "hasten_gen_ai_client_token_usage",
            "Tokens per answer, by token type (input, output), from the answer's usage",
            (*base, "token_type"),
            TOKEN_BUCKETS,
        ),
    )


def _counters(base: tuple[str, ...], tenant: tuple[str, ...]) -> tuple[CounterFamily, ...]:
    """The per-request counters, in the order ``Metrics`` unpacks them."""
    return (
        CounterFamily(
            "hasten_gen_ai_tokens",
            "Tokens in answers, by token type (input, output)",
            (*base, "token_type"),
        ),
        CounterFamily(
            "hasten_requests",
            "Completion and embeddings requests answered, by status",
            (*base, "status"),
        ),
        CounterFamily(
            "hasten_errors",
            "Error answers (and errors ending a stream), by status and code",
            ("status", "code"),
        ),
        CounterFamily(
            "hasten_latency_saved_seconds",
            "Estimated upstream latency avoided (hasten.metrics.saved), by source",
            ("model", "source", *tenant),
        ),
        CounterFamily(
            "hasten_failovers",
            "Failed upstream attempts, by deployment and reason",
            ("model", "deployment", "reason"),
        ),
        CounterFamily(
            "hasten_retries",
            "Attempts that retried the deployment that had just failed",
            ("model", "deployment"),
        ),
        CounterFamily(
            "hasten_stream_resumes",
            "Broken upstream streams continued, by outcome (regenerated, prefilled, failed)",
            ("model", "outcome"),
        ),
    )


def _count_failovers(metrics: Metrics, outcome: RequestOutcome) -> None:
    """Each failed attempt by reason; one followed by a try on the same deployment is a
    retry (the attempts in order are the failures, then the winner)."""
    names = []
    for failover in outcome.failovers:
        name, _, reason = failover.rpartition("=")
        names.append(name)
        metrics.failovers.child(outcome.model, name, reason).inc()
    names.append(outcome.deployment or "")
    for earlier, later in itertools.pairwise(names):
        if earlier == later:
            metrics.retries.child(outcome.model, later).inc()


def _saved_source(outcome: RequestOutcome) -> str:
    if outcome.cache in (HIT, SEMANTIC, COALESCED):
        return outcome.cache
    return "hedge"

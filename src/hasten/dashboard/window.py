"""The dashboard's rolling window: the last minutes of completion requests, per second.

An observer of the per-request seam (``hasten.metrics``): each finished request lands in
the bucket of its second. A bucket holds counts by cache outcome, sparse log histograms of
served TTFT, served end to end and upstream time to first byte, and the few slowest
requests of that second with their breakdown. Running totals over the whole span are kept
beside the buckets, so a snapshot never re-reads every sample. Pure: the clock is an
argument, so the tests drive it by hand.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from hasten.dashboard.histogram import DenseHistogram, bin_of, sparse_quantile_ms

QUANTILES = (0.5, 0.95, 0.99)


class Completed(Protocol):
    """What the window reads of one finished request (a ``RequestOutcome``)."""

    @property
    def request_id(self) -> str: ...
    @property
    def cache(self) -> str: ...
    @property
    def deployment(self) -> str | None: ...
    @property
    def status(self) -> int: ...
    @property
    def gateway_s(self) -> float: ...
    @property
    def upstream_ttfb_s(self) -> float | None: ...
    @property
    def is_upstream_call(self) -> bool: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def e2e_s(self) -> float: ...
    @property
    def saved_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """How much the window remembers."""

    span_s: int = 300  # the "last minutes" every windowed number covers
    num_slowest: int = 10  # rows of the slowest-requests table
    rate_span_s: int = 10  # requests/s is the average over this many seconds


DEFAULT_WINDOW = WindowConfig()


@dataclass(frozen=True, slots=True)
class SlowRequest:
    """One of the slowest recent requests, with where its time went."""

    e2e_ms: float
    request_id: str
    cache: str
    deployment: str | None
    status: int
    gateway_ms: float
    upstream_ttfb_ms: float | None
    ttft_ms: float | None
    at_s: float

    def to_json(self, now_s: float) -> dict[str, object]:
        return {
            "request_id": self.request_id,
            "cache": self.cache,
            "deployment": self.deployment,
            "status": self.status,
            "gateway_ms": _round(self.gateway_ms),
            "upstream_ttfb_ms": _round(self.upstream_ttfb_ms),
            "ttft_ms": _round(self.ttft_ms),
            "e2e_ms": _round(self.e2e_ms),
            "age_s": round(max(0.0, now_s - self.at_s), 1),
        }


@dataclass(slots=True)
class Lifetime:
    """Totals since start, from the same records ``hasten_requests_total`` and
    ``hasten_latency_saved_seconds_total`` count, so the two always agree."""

    by_cache: Counter[str] = field(default_factory=Counter)
    saved_s: float = 0.0


class _Second:
    """One second of requests."""

    __slots__ = ("counts", "e2e", "second", "slowest", "ttfb", "ttft")

    def __init__(self) -> None:
        self.second = -1
        self.counts: Counter[str] = Counter()
        self.ttft: Counter[int] = Counter()
        self.e2e: Counter[int] = Counter()
        self.ttfb: Counter[int] = Counter()
        # A min-heap of (e2e_ms, tiebreak, request): its root is the fastest of the kept.
        self.slowest: list[tuple[float, int, SlowRequest]] = []

    def clear(self, second: int) -> None:
        self.second = second
        self.counts.clear()
        self.ttft.clear()
        self.e2e.clear()
        self.ttfb.clear()
        self.slowest.clear()

    @property
    def num_requests(self) -> int:
        return sum(self.counts.values())


class RollingWindow:
    """Per-second buckets over the last ``span_s`` seconds, with running totals."""

    def __init__(self, config: WindowConfig = DEFAULT_WINDOW) -> None:
        self.config = config
        self._seconds = [_Second() for _ in range(config.span_s)]
        self._counts: Counter[str] = Counter()
        self._ttft = DenseHistogram()
        self._e2e = DenseHistogram()
        self._ttfb = DenseHistogram()
        self._tiebreak = itertools.count()
        self.lifetime = Lifetime()

    def observe(self, outcome: Completed, now_s: float) -> None:
        """Adds one finished request, at ``now_s`` (seconds on a monotonic clock)."""
        bucket = self._bucket(int(now_s))
        bucket.counts[outcome.cache] += 1
        self._counts[outcome.cache] += 1
        self.lifetime.by_cache[outcome.cache] += 1
        if outcome.saved_s is not None:
            self.lifetime.saved_s += outcome.saved_s
        e2e_ms = outcome.e2e_s * 1000.0
        _record(bucket.e2e, self._e2e, e2e_ms)
        if outcome.ttft_s is not None:
            _record(bucket.ttft, self._ttft, outcome.ttft_s * 1000.0)
        # "Direct upstream" is one sample per upstream call: a coalesced request shares its
        # leader's call and would count the same time to first byte twice.
        if outcome.is_upstream_call and outcome.upstream_ttfb_s is not None:
            _record(bucket.ttfb, self._ttfb, outcome.upstream_ttfb_s * 1000.0)
        heap = bucket.slowest
        if len(heap) < self.config.num_slowest or e2e_ms > heap[0][0]:
            item = (e2e_ms, next(self._tiebreak), _slow(outcome, e2e_ms, now_s))
            if len(heap) < self.config.num_slowest:
                heapq.heappush(heap, item)
            else:
                heapq.heapreplace(heap, item)

    def snapshot(self, now_s: float) -> dict[str, object]:
        """Everything windowed the dashboard shows, JSON-ready."""
        now = int(now_s)
        self._expire(now)
        by_second = {b.second: b for b in self._seconds if b.second > now - self.config.span_s}
        rate_seconds = [by_second.get(s) for s in range(now - self.config.rate_span_s + 1, now + 1)]
        num_recent = sum(b.num_requests for b in rate_seconds if b is not None)
        return {
            "span_s": self.config.span_s,
            "requests": sum(self._counts.values()),
            "requests_per_s": round(num_recent / self.config.rate_span_s, 3),
            "by_cache": dict(self._counts),
            "served_ttft_ms": _quantiles(self._ttft),
            "served_e2e_ms": _quantiles(self._e2e),
            "upstream_ttfb_ms": _quantiles(self._ttfb),
            "series": self._series(by_second, now),
            "slowest": self._slowest(by_second.values(), now_s),
        }

    def _bucket(self, second: int) -> _Second:
        bucket = self._seconds[second % self.config.span_s]
        if bucket.second != second:
            self._retire(bucket)
            bucket.clear(second)
        return bucket

    def _expire(self, now: int) -> None:
        for bucket in self._seconds:
            if bucket.second != -1 and bucket.second <= now - self.config.span_s:
                self._retire(bucket)
                bucket.clear(-1)

    def _retire(self, bucket: _Second) -> None:
        """Takes a second that left the span out of the running totals."""
        self._counts.subtract(bucket.counts)
        self._counts = +self._counts  # drops the outcomes that fell to zero
        self._ttft.remove(bucket.ttft)
        self._e2e.remove(bucket.e2e)
        self._ttfb.remove(bucket.ttfb)

    def _series(self, by_second: dict[int, _Second], now: int) -> dict[str, list[object]]:
        """One point per second, oldest first, for the charts (``t`` is seconds ago)."""
        series: dict[str, list[object]] = {
            "t": [],
            "requests": [],
            "hits": [],
            "ttft_p50_ms": [],
            "ttft_p95_ms": [],
            "ttfb_p50_ms": [],
            "ttfb_p95_ms": [],
        }
        for second in range(now - self.config.span_s + 1, now + 1):
            bucket = by_second.get(second)
            series["t"].append(second - now)
            if bucket is None:
                for name in ("requests", "hits"):
                    series[name].append(0)
                for name in ("ttft_p50_ms", "ttft_p95_ms", "ttfb_p50_ms", "ttfb_p95_ms"):
                    series[name].append(None)
                continue
            series["requests"].append(bucket.num_requests)
            series["hits"].append(bucket.counts["hit"] + bucket.counts["semantic"])
            series["ttft_p50_ms"].append(_round(sparse_quantile_ms(bucket.ttft, 0.5)))
            series["ttft_p95_ms"].append(_round(sparse_quantile_ms(bucket.ttft, 0.95)))
            series["ttfb_p50_ms"].append(_round(sparse_quantile_ms(bucket.ttfb, 0.5)))
            series["ttfb_p95_ms"].append(_round(sparse_quantile_ms(bucket.ttfb, 0.95)))
        return series

    def _slowest(self, buckets: Iterable[_Second], now_s: float) -> list[dict[str, object]]:
        kept = [item for bucket in buckets for item in bucket.slowest]
        top = heapq.nlargest(self.config.num_slowest, kept, key=lambda item: (item[0], item[1]))
        return [item[2].to_json(now_s) for item in top]


def _record(sparse: Counter[int], total: DenseHistogram, value_ms: float) -> None:
    index = bin_of(value_ms)
    sparse[index] += 1
    total.add(index)


def _slow(outcome: Completed, e2e_ms: float, now_s: float) -> SlowRequest:
    ttfb_s, ttft_s = outcome.upstream_ttfb_s, outcome.ttft_s
    return SlowRequest(
        e2e_ms=e2e_ms,
        request_id=outcome.request_id,
        cache=outcome.cache,
        deployment=outcome.deployment,
        status=outcome.status,
        gateway_ms=outcome.gateway_s * 1000.0,
        upstream_ttfb_ms=None if ttfb_s is None else ttfb_s * 1000.0,
        ttft_ms=None if ttft_s is None else ttft_s * 1000.0,
        at_s=now_s,
    )


def _quantiles(histogram: DenseHistogram) -> dict[str, object]:
    p50, p95, p99 = histogram.quantiles_ms(QUANTILES)
    return {"count": histogram.count, "p50": _round(p50), "p95": _round(p95), "p99": _round(p99)}


def _round(value_ms: float | None) -> float | None:
    return None if value_ms is None else round(value_ms, 2)

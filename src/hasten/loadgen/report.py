"""The result of one load run: figures in milliseconds and per-second rates, as JSON or text."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hasten.loadgen.compat import RunFigures, guidellm_fields, vllm_fields
from hasten.loadgen.recorder import CACHE_ABSENT, Recorder
from hasten.loadgen.settings import LoadSettings
from hasten.loadgen.stats import Summary, ratio, scaled, summarize
from hasten.loadgen.timeline import SecondBucket, per_second

MS_PER_S = 1000.0


@dataclass(frozen=True, slots=True)
class Samples:
    """Raw per-request samples, kept only on request (for merging runs and for charts).

    ``ttft_ms`` has the requests that had a first token; the ``request_*`` lists are
    aligned with ``latency_ms`` (one entry per successful request, NaN for no TTFT).
    """

    ttft_ms: list[float]
    latency_ms: list[float]
    inter_token_ms: list[float]
    request_ttft_ms: list[float] = field(default_factory=list)
    request_output_tokens: list[int] = field(default_factory=list)
    request_done_s: list[float] = field(default_factory=list)
    request_is_hit: list[bool] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LoadReport:
    target_url: str
    endpoint: str
    stream: bool
    mode: str
    concurrency: int | None
    rate_rps: float | None
    num_warmup: int
    num_requests: int
    num_ok: int
    num_errors: int
    errors: dict[str, int]
    duration_s: float
    throughput_rps: float
    num_output_tokens: int
    output_tokens_per_s: float
    ttft_ms: Summary | None
    latency_ms: Summary | None
    inter_token_ms: Summary | None
    cache: dict[str, int]
    hit_ratio: float | None
    client_cpu_percent: float | None
    samples: Samples | None = None
    num_input_tokens: int = 0
    # Where output token counts came from: "usage" (the server's), "chunks" (counted
    # content chunks, for streams without usage), "mixed", or "none" (nothing succeeded).
    output_token_source: str = "none"
    timeline: list[SecondBucket] = field(default_factory=list)
    vllm: dict[str, Any] = field(default_factory=dict)
    guidellm: dict[str, Any] = field(default_factory=dict)

    @property
    def has_cache_header(self) -> bool:
        """Whether any answer carried x-hasten-cache (a direct upstream sends none)."""
        return any(status != CACHE_ABSENT for status in self.cache)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; raw samples are left out (they can be large)."""
        summaries = {
            "ttft_ms": self.ttft_ms,
            "latency_ms": self.latency_ms,
            "inter_token_ms": self.inter_token_ms,
        }
        result: dict[str, Any] = {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if item.name not in summaries and item.name not in ("samples", "timeline")
        }
        result["timeline"] = [bucket.to_dict() for bucket in self.timeline]
        result.update(
            {name: None if value is None else value.to_dict() for name, value in summaries.items()}
        )
        return result


def build_report(
    settings: LoadSettings,
    target_url: str,
    recorder: Recorder,
    *,
    duration_s: float,
    client_cpu_s: float | None,
) -> LoadReport:
    ttft_ms = scaled(recorder.ttft_s, MS_PER_S)
    latency_ms = scaled(recorder.latency_s, MS_PER_S)
    inter_token_ms = scaled(recorder.gaps_s, MS_PER_S)
    samples = (
        _samples(recorder, ttft_ms, latency_ms, inter_token_ms) if settings.keep_samples else None
    )
    figures = RunFigures(
        duration_s=duration_s,
        num_failed=recorder.num_errors,
        num_input_tokens=recorder.num_input_tokens,
        request_ttft_s=recorder.request_ttft_s,
        request_latency_s=recorder.latency_s,
        request_output_tokens=recorder.request_output_tokens,
        gaps_s=recorder.gaps_s,
    )
    cpu_fraction = ratio(client_cpu_s or 0.0, duration_s) if client_cpu_s is not None else None
    return LoadReport(
        target_url=target_url,
        endpoint=settings.endpoint,
        stream=settings.stream,
        mode="open" if settings.is_open_loop else "closed",
        concurrency=settings.concurrency if settings.is_open_loop else settings.num_workers,
        rate_rps=settings.rate_rps,
        num_warmup=settings.num_warmup,
        num_requests=recorder.num_done,
        num_ok=recorder.num_ok,
        num_errors=recorder.num_errors,
        errors=dict(sorted(recorder.errors.items())),
        duration_s=duration_s,
        throughput_rps=ratio(recorder.num_ok, duration_s) or 0.0,
        num_output_tokens=recorder.num_output_tokens,
        output_tokens_per_s=ratio(recorder.num_output_tokens, duration_s) or 0.0,
        ttft_ms=summarize(ttft_ms),
        latency_ms=summarize(latency_ms),
        inter_token_ms=summarize(inter_token_ms),
        cache=dict(sorted(recorder.cache_counts.items())),
        hit_ratio=ratio(recorder.num_hits, recorder.num_ok),
        client_cpu_percent=None if cpu_fraction is None else cpu_fraction * 100.0,
        samples=samples,
        num_input_tokens=recorder.num_input_tokens,
        output_token_source=_token_source(recorder),
        timeline=per_second(
            recorder.request_done_s, recorder.request_output_tokens, recorder.request_is_hit
        ),
        vllm=vllm_fields(
            figures, percentiles=settings.percentiles, goodput_ms=dict(settings.goodput_ms)
        ),
        guidellm=guidellm_fields(figures),
    )


def _samples(
    recorder: Recorder, ttft_ms: list[float], latency_ms: list[float], inter_token_ms: list[float]
) -> Samples:
    return Samples(
        ttft_ms,
        latency_ms,
        inter_token_ms,
        request_ttft_ms=scaled(recorder.request_ttft_s, MS_PER_S),
        request_output_tokens=list(recorder.request_output_tokens),
        request_done_s=list(recorder.request_done_s),
        request_is_hit=list(recorder.request_is_hit),
    )


def _token_source(recorder: Recorder) -> str:
    if not recorder.num_ok:
        return "none"
    if not recorder.num_chunk_counted:
        return "usage"
    return "chunks" if recorder.num_chunk_counted == recorder.num_ok else "mixed"


def format_text(report: LoadReport) -> str:
    """A short human summary, one figure group per line."""
    load = (
        f"rate {report.rate_rps:g} req/s (open loop)"
        if report.rate_rps is not None
        else f"concurrency {report.concurrency} (closed loop)"
    )
    kind = ("stream " if report.stream else "") + report.endpoint
    lines = [
        f"target      {report.target_url}  [{kind}, {load}, warmup {report.num_warmup}]",
        f"requests    {report.num_requests} done, {report.num_ok} ok, {report.num_errors} errors"
        f" in {report.duration_s:.2f} s",
        f"throughput  {report.throughput_rps:.1f} req/s, {report.output_tokens_per_s:.1f} tokens/s"
        f" ({report.num_output_tokens} output tokens, counted by {report.output_token_source})",
    ]
    for label, summary in (
        ("ttft", report.ttft_ms),
        ("latency", report.latency_ms),
        ("inter-token", report.inter_token_ms),
    ):
        if summary is not None:
            lines.append(f"{label:<12}{_format_summary(summary)}")
    cache = ", ".join(f"{name} {count}" for name, count in report.cache.items()) or "none"
    hit = "n/a" if report.hit_ratio is None else f"{report.hit_ratio:.1%}"
    lines.append(f"cache       hit ratio {hit} ({cache})")
    if report.errors:
        errors = ", ".join(f"{kind}: {count}" for kind, count in report.errors.items())
        lines.append(f"errors      {errors}")
    goodput = report.vllm.get("request_goodput")
    if goodput is not None:
        lines.append(f"goodput     {goodput:.1f} req/s meeting every objective given")
    if report.client_cpu_percent is not None:
        lines.append(f"client cpu  {report.client_cpu_percent:.0f}% of one core")
    return "\n".join(lines)


def _format_summary(summary: Summary) -> str:
    parts = [f"p50 {summary.p50:.2f}", f"p95 {summary.p95:.2f}", f"p99 {summary.p99:.2f}"]
    if summary.p99_9 is not None:
        parts.append(f"p99.9 {summary.p99_9:.2f}")
    parts.append(f"max {summary.max:.2f}")
    return "  ".join(parts) + f" ms  (n={summary.count})"

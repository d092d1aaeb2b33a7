"""Turns the raw samples of bench/overhead/overhead.py into its figures and one summary line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hasten.loadgen.report import LoadReport
from hasten.loadgen.stats import Summary, summarize

THROUGHPUT_CONCURRENCY = 32
NO_METRICS = "hasten-no-metrics"  # the same gateway with --no-metrics: what metrics cost


@dataclass
class Tally:
    """Samples and counters for one target, merged over rounds."""

    sequential_ms: list[float]
    stream_ttft_ms: list[float]
    # Whole streamed answers (to the last byte): for the direct target, what hasten's own
    # upstream call costs when it asks a non-stream request as a stream.
    stream_whole_ms: list[float] = field(default_factory=list)
    num_throughput_ok: int = 0
    throughput_duration_s: float = 0.0
    throughput_client_cpu_s: float = 0.0
    num_requests: int = 0
    num_errors: int = 0
    server_cpu_s: float = 0.0  # the target's server processes, over all its requests

    @property
    def server_cpu_us_per_request(self) -> float | None:
        if not self.num_requests or not self.server_cpu_s:
            return None
        return round(self.server_cpu_s / self.num_requests * 1e6, 1)

    def add_errors(self, report: LoadReport) -> None:
        self.num_requests += report.num_requests
        self.num_errors += report.num_errors


def percentiles(samples: list[float]) -> dict[str, float | None]:
    summary: Summary | None = summarize(samples)
    if summary is None:
        return {"p50": None, "p99": None, "count": 0}
    return {"p50": round(summary.p50, 3), "p99": round(summary.p99, 3), "count": summary.count}


def added(target: dict[str, Any], direct: dict[str, Any]) -> dict[str, float | None]:
    return {
        key: None
        if target[key] is None or direct[key] is None
        else round(target[key] - direct[key], 3)
        for key in ("p50", "p99")
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    # A gateway that adds (within noise) nothing makes any ratio meaningless, not infinite.
    if numerator is None or denominator is None or denominator <= 0.0:
        return None
    return round(numerator / denominator, 2)


def figures(tallies: dict[str, Tally], cache_hits: LoadReport) -> dict[str, Any]:
    sequential = {name: percentiles(t.sequential_ms) for name, t in tallies.items()}
    stream = {name: percentiles(t.stream_ttft_ms) for name, t in tallies.items()}
    throughput = {
        name: round(t.num_throughput_ok / t.throughput_duration_s, 1)
        if t.throughput_duration_s
        else None
        for name, t in tallies.items()
    }
    result: dict[str, Any] = {
        "sequential_latency_ms": sequential,
        "stream_ttft_ms": stream,
        "added_ms": {
            name: {
                "sequential": added(sequential[name], sequential["direct"]),
                "stream_ttft": added(stream[name], stream["direct"]),
            }
            for name in tallies
            if name != "direct"
        },
        "throughput_rps": throughput,
        # The server's own CPU (process tree) per request served, warm-up and load included.
        "server_cpu_us_per_request": {
            name: t.server_cpu_us_per_request for name, t in tallies.items()
        },
        "throughput_concurrency": THROUGHPUT_CONCURRENCY,
        # Shows the measuring client is not what caps throughput (100 = one core busy).
        "throughput_client_cpu_percent": {
            name: round(100 * t.throughput_client_cpu_s / t.throughput_duration_s, 1)
            if t.throughput_duration_s
            else None
            for name, t in tallies.items()
        },
        "cache_hit_ms": {
            **percentiles(cache_hits.samples.latency_ms if cache_hits.samples else []),
            "hit_ratio": cache_hits.hit_ratio,
        },
        "errors": {
            name: {"requests": t.num_requests, "errors": t.num_errors}
            for name, t in tallies.items()
        },
    }
    # An extra, labelled figure: hasten asks a non-stream request upstream as a stream, so
    # its non-stream latency measured against the direct *stream* (whole answer) is what
    # the gateway adds over the upstream call it actually makes. The headline figure above
    # stays against the direct non-stream request, as the client experiences it.
    direct_stream = percentiles(tallies["direct"].stream_whole_ms)
    if direct_stream["count"]:
        result["direct_stream_whole_ms"] = direct_stream
        result["added_ms_vs_direct_stream"] = {
            name: added(sequential[name], direct_stream) for name in tallies if name != "direct"
        }
    if NO_METRICS in tallies:
        result["metrics_cost"] = metrics_cost(sequential, stream, throughput, tallies)
    if "litellm" in tallies:
        hasten_added, litellm_added = result["added_ms"]["hasten"], result["added_ms"]["litellm"]
        result["ratios"] = {
            f"litellm_added_over_hasten_added_{kind}_{q}": ratio(
                litellm_added[kind][q], hasten_added[kind][q]
            )
            for kind in ("sequential", "stream_ttft")
            for q in ("p50", "p99")
        }
        result["ratios"]["hasten_over_litellm_throughput"] = ratio(
            throughput["hasten"], throughput["litellm"]
        )
    return result


def metrics_cost(
    sequential: dict[str, Any],
    stream: dict[str, Any],
    throughput: dict[str, float | None],
    tallies: dict[str, Tally],
) -> dict[str, Any]:
    """hasten with metrics against hasten without them: the budget is +0.05 ms p50 and
    throughput within 5%. The gateway's CPU per request is the steadier figure on a busy
    machine: other processes' load stretches wall time, not the CPU a request needs."""
    with_cpu = tallies["hasten"].server_cpu_us_per_request
    without_cpu = tallies[NO_METRICS].server_cpu_us_per_request
    return {
        "server_cpu_us_per_request": {"hasten": with_cpu, NO_METRICS: without_cpu},
        "added_server_cpu_us_per_request": None
        if with_cpu is None or without_cpu is None
        else round(with_cpu - without_cpu, 1),
        "added_ms": {
            "sequential": added(sequential["hasten"], sequential[NO_METRICS]),
            "stream_ttft": added(stream["hasten"], stream[NO_METRICS]),
        },
        "throughput_ratio": ratio(throughput["hasten"], throughput[NO_METRICS]),
    }


def summary_line(result: dict[str, Any]) -> str:
    seq, ttft = result["sequential_latency_ms"], result["added_ms"]
    parts = [
        f"overhead vs direct (direct p50 {seq['direct']['p50']} ms)",
        "hasten adds {} / {} ms p50/p99 (stream TTFT {} / {})".format(
            *_pair(ttft["hasten"]["sequential"]), *_pair(ttft["hasten"]["stream_ttft"])
        ),
    ]
    if "litellm" in ttft:
        parts.append(
            "LiteLLM adds {} / {} ms (stream TTFT {} / {})".format(
                *_pair(ttft["litellm"]["sequential"]), *_pair(ttft["litellm"]["stream_ttft"])
            )
        )
    rps = result["throughput_rps"]
    parts.append(
        f"@{THROUGHPUT_CONCURRENCY}: "
        + ", ".join(f"{name} {value} req/s" for name, value in rps.items())
    )
    if "metrics_cost" in result:
        cost = result["metrics_cost"]
        parts.append(
            "metrics cost {} ms p50 (stream TTFT {}), throughput x{}, {} us CPU a request".format(
                cost["added_ms"]["sequential"]["p50"],
                cost["added_ms"]["stream_ttft"]["p50"],
                cost["throughput_ratio"],
                cost["added_server_cpu_us_per_request"],
            )
        )
    parts.append(f"cache hit p50 {result['cache_hit_ms']['p50']} ms")
    idle_mb = result["rss_mb"]["idle_after_load"]
    parts.append("idle RSS " + ", ".join(f"{name} {mb} MB" for name, mb in idle_mb.items()))
    return "; ".join(parts)


def _pair(values: dict[str, float | None]) -> tuple[float | None, float | None]:
    return values["p50"], values["p99"]

"""The run's figures under the field names vLLM's and GuideLLM's benchmarks write (pure).

vLLM: the result JSON of ``benchmarks/benchmark_serving.py`` and of its successor
``vllm bench serve`` (``vllm/benchmarks/serve.py``), as both read in 2025 (``failed`` is
only in the latter; the former misspelled ``request_goodput:``): ``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``request_goodput``, ``output_throughput``, ``total_token_throughput`` and, for each of
``ttft``, ``tpot``, ``itl``, ``e2el``: ``mean_*_ms``, ``median_*_ms``, ``std_*_ms`` and
``p{P}_*_ms`` for the percentiles asked for (vLLM's ``--metric-percentiles``, default 99).
Same definitions: TPOT per request is (e2el - ttft) / (output tokens - 1) over requests
with more than one token; ITL is every gap between content chunks; std is the population
one (``np.std``); percentiles interpolate linearly (``np.percentile``). One difference:
where a metric has no samples vLLM writes 0 and this writes null.

GuideLLM: ``GenerativeMetrics`` (same names in its ``guidellm.objects`` era and in the later
``guidellm.schemas`` layout):
``request_latency`` (seconds), ``time_to_first_token_ms``, ``time_per_output_token_ms``
(e2e / output tokens, first token included), ``inter_token_latency_ms`` (per request:
(e2e - ttft) / (output tokens - 1)), ``output_token_count``, ``prompt_token_count``, each
as ``{"successful": DistributionSummary}`` with ``mean``, ``median``, ``std_dev``, ``min``,
``max``, ``count``, ``total_sum`` and ``percentiles`` ``p001`` .. ``p999``.
``requests_per_second`` and ``output_tokens_per_second`` carry only the run's mean (GuideLLM
keeps a distribution over time; the per-second series is in the report's ``timeline``).
GuideLLM ends a request at its last token; here it ends at the end of the response.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hasten.loadgen.slo import count_good, request_tpot_s
from hasten.loadgen.stats import mean_and_std, percentile

MS_PER_S = 1000.0
DEFAULT_PERCENTILES: tuple[float, ...] = (99.0,)
GUIDELLM_PERCENTILES: dict[str, float] = {
    "p001": 0.1,
    "p01": 1.0,
    "p05": 5.0,
    "p10": 10.0,
    "p25": 25.0,
    "p50": 50.0,
    "p75": 75.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
    "p999": 99.9,
}


@dataclass(frozen=True, slots=True)
class RunFigures:
    """Raw per-request figures of one run, in seconds; the ``request`` lists are aligned."""

    duration_s: float
    num_failed: int
    num_input_tokens: int
    request_ttft_s: Sequence[float]
    request_latency_s: Sequence[float]
    request_output_tokens: Sequence[int]
    gaps_s: Sequence[float]

    @property
    def num_completed(self) -> int:
        return len(self.request_latency_s)

    @property
    def num_output_tokens(self) -> int:
        return sum(self.request_output_tokens)

    def tpot_s(self) -> list[float]:
        """vLLM's TPOT of each request with more than one output token and a TTFT."""
        return [
            request_tpot_s(latency, ttft, tokens)
            for ttft, latency, tokens in self.requests()
            if tokens > 1 and math.isfinite(ttft)
        ]

    def requests(self) -> zip[tuple[float, float, int]]:
        return zip(
            self.request_ttft_s, self.request_latency_s, self.request_output_tokens, strict=True
        )


def percentile_word(percent: float) -> str:
    """vLLM's key spelling: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(percent)) if int(percent) == percent else str(percent)


def vllm_fields(
    figures: RunFigures,
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput_ms: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The block vLLM's serving benchmark writes, without its per-request arrays."""
    duration_s = figures.duration_s
    num_output = figures.num_output_tokens
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": figures.num_completed,
        "failed": figures.num_failed,
        "total_input_tokens": figures.num_input_tokens,
        "total_output_tokens": num_output,
        "request_throughput": _per_s(figures.num_completed, duration_s),
        "request_goodput": None,
        "output_throughput": _per_s(num_output, duration_s),
        "total_token_throughput": _per_s(figures.num_input_tokens + num_output, duration_s),
    }
    if goodput_ms:
        num_good = count_good(
            goodput_ms,
            ttft_s=figures.request_ttft_s,
            latency_s=figures.request_latency_s,
            output_tokens=figures.request_output_tokens,
        )
        result["request_goodput"] = _per_s(num_good, duration_s)
    metrics: dict[str, Sequence[float]] = {
        "ttft": [value for value in figures.request_ttft_s if math.isfinite(value)],
        "tpot": figures.tpot_s(),
        "itl": figures.gaps_s,
        "e2el": figures.request_latency_s,
    }
    for name, values_s in metrics.items():
        result.update(_vllm_metric(name, values_s, percentiles))
    return result


def _vllm_metric(
    name: str, values_s: Sequence[float], percentiles: Sequence[float]
) -> dict[str, float | None]:
    fields: dict[str, float | None] = {}
    if not values_s:
        fields[f"mean_{name}_ms"] = fields[f"median_{name}_ms"] = fields[f"std_{name}_ms"] = None
        for percent in percentiles:
            fields[f"p{percentile_word(percent)}_{name}_ms"] = None
        return fields
    ordered = sorted(values_s)
    mean_s, std_s = mean_and_std(ordered)
    fields[f"mean_{name}_ms"] = mean_s * MS_PER_S
    fields[f"median_{name}_ms"] = percentile(ordered, 0.5) * MS_PER_S
    fields[f"std_{name}_ms"] = std_s * MS_PER_S
    for percent in percentiles:
        key = f"p{percentile_word(percent)}_{name}_ms"
        fields[key] = percentile(ordered, percent / 100.0) * MS_PER_S
    return fields


def guidellm_fields(figures: RunFigures) -> dict[str, Any]:
    """GuideLLM's ``GenerativeMetrics`` names, successful requests only."""
    requests = list(figures.requests())
    itl_ms = [
        MS_PER_S * request_tpot_s(latency, ttft, tokens)
        for ttft, latency, tokens in requests
        if tokens > 1 and math.isfinite(ttft)
    ]
    tpot_ms = [MS_PER_S * latency / tokens for _, latency, tokens in requests if tokens > 0]
    distributions: dict[str, Sequence[float]] = {
        "request_latency": figures.request_latency_s,
        "time_to_first_token_ms": [
            MS_PER_S * ttft for ttft in figures.request_ttft_s if math.isfinite(ttft)
        ],
        "time_per_output_token_ms": tpot_ms,
        "inter_token_latency_ms": itl_ms,
        "output_token_count": [float(tokens) for tokens in figures.request_output_tokens],
    }
    metrics: dict[str, Any] = {
        name: {"successful": distribution_summary(values)} for name, values in distributions.items()
    }
    metrics["prompt_token_count"] = {"successful": {"total_sum": figures.num_input_tokens}}
    metrics["requests_per_second"] = {
        "successful": {"mean": _per_s(figures.num_completed, figures.duration_s)}
    }
    metrics["output_tokens_per_second"] = {
        "successful": {"mean": _per_s(figures.num_output_tokens, figures.duration_s)}
    }
    return metrics


def distribution_summary(values: Sequence[float]) -> dict[str, Any] | None:
    """GuideLLM's ``DistributionSummary`` shape (mode and variance left out); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    mean, std = mean_and_std(ordered)
    return {
        "mean": mean,
        "median": percentile(ordered, 0.5),
        "std_dev": std,
        "min": ordered[0],
        "max": ordered[-1],
        "count": len(ordered),
        "total_sum": math.fsum(ordered),
        "percentiles": {
            key: percentile(ordered, percent / 100.0)
            for key, percent in GUIDELLM_PERCENTILES.items()
        },
    }


def parse_percentiles(raw: str) -> tuple[float, ...]:
    """``"50,90,99"`` to ``(50.0, 90.0, 99.0)``; raises ValueError outside (0, 100]."""
    values: list[float] = []
    for part in raw.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"percentile {part!r} is not a number") from None
        if not 0 < value <= 100:
            raise ValueError(f"percentile {value:g} is outside (0, 100]")
        values.append(value)
    return tuple(values)


def _per_s(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0

"""Two runs of one workload side by side: the same figure direct and through hasten (pure)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hasten.loadgen.report import LoadReport
from hasten.loadgen.stats import Summary

PRIMARY_LABEL = "hasten"
COMPARE_LABEL = "direct"


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """``speedup`` > 1 means the primary run did better (lower latency, higher throughput)."""

    figure: str
    unit: str
    compare: float | None
    primary: float | None
    speedup: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_reports(primary: LoadReport, compare: LoadReport) -> list[ComparisonRow]:
    """Latency percentiles (lower is better) and throughputs (higher is better)."""
    rows: list[ComparisonRow] = []
    for name, primary_summary, compare_summary in (
        ("ttft", primary.ttft_ms, compare.ttft_ms),
        ("e2e latency", primary.latency_ms, compare.latency_ms),
    ):
        for stat in ("p50", "p95", "p99"):
            mine = _stat(primary_summary, stat)
            theirs = _stat(compare_summary, stat)
            rows.append(ComparisonRow(f"{name} {stat}", "ms", theirs, mine, _ratio(theirs, mine)))
    for name, unit, mine_rate, their_rate in (
        ("throughput", "req/s", primary.throughput_rps, compare.throughput_rps),
        ("output tokens", "tokens/s", primary.output_tokens_per_s, compare.output_tokens_per_s),
    ):
        rows.append(ComparisonRow(name, unit, their_rate, mine_rate, _ratio(mine_rate, their_rate)))
    return rows


def format_comparison(
    rows: list[ComparisonRow],
    primary_label: str = PRIMARY_LABEL,
    compare_label: str = COMPARE_LABEL,
) -> str:
    header = f"{'figure':<26}{compare_label:>12}{primary_label:>12}{'speedup':>10}"
    lines = [header]
    for row in rows:
        lines.append(
            f"{row.figure + ' (' + row.unit + ')':<26}"
            f"{_number(row.compare):>12}{_number(row.primary):>12}"
            f"{_times(row.speedup):>10}"
        )
    return "\n".join(lines)


def _stat(summary: Summary | None, name: str) -> float | None:
    return None if summary is None else float(getattr(summary, name))


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"

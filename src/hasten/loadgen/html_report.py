"""``hasten bench --report out.html``: one self-contained page (inline CSS and SVG, no URLs).

Sections: run settings, summary table of every target, the comparison table when two
targets ran, latency and TTFT CDFs, a TTFT histogram, and per-second throughput and hit
ratio; the vLLM/GuideLLM-named figures close the page as JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import orjson

from hasten.loadgen.compare import ComparisonRow
from hasten.loadgen.report import LoadReport, Samples
from hasten.loadgen.stats import Summary, cdf_points, histogram
from hasten.loadgen.svg import BarSeries, Series, bar_chart, line_chart
from hasten.loadgen.timeline import RatePoint, rate_points

COLORS = ("#4c78a8", "#e45756", "#54a24b", "#b279a2")
NUM_HISTOGRAM_BINS = 30
LabelledRun = tuple[str, LoadReport]

_STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.charts svg { display: block; margin: 1em 0; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
"""


def render_html(
    runs: Sequence[LabelledRun],
    context: Mapping[str, Any],
    comparison: Sequence[ComparisonRow] = (),
) -> str:
    """The page for ``runs`` (each with samples kept), the first being the primary target."""
    sections = [
        "<h1>hasten bench report</h1>",
        f"<p>{escape(str(context.get('date', '')))} &middot; hasten "
        f"{escape(str(context.get('hasten_version', '')))} &middot; "
        f"{escape(str(context.get('cpu_count', '?')))} CPUs on the client machine</p>",
        "<h2>Run settings</h2>",
        _settings_table(context.get("settings", {})),
        "<h2>Summary</h2>",
        _summary_table(runs),
    ]
    if comparison:
        sections += ["<h2>Comparison</h2>", _comparison_table(runs, comparison)]
    sections += ['<h2>Charts</h2><div class="charts">', *_charts(runs), "</div>"]
    sections += ["<h2>vLLM and GuideLLM field names</h2>", _fields_json(runs)]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>hasten bench report</title><style>{_STYLE}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(path: Path, html: str) -> None:
    path.write_text(html, encoding="utf-8")


def _settings_table(settings: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{escape(_setting(value))}</td></tr>"
        for name, value in settings.items()
    )
    return f"<table><tr><th>setting</th><th>value</th></tr>{rows}</table>"


def _setting(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "-"
    return str(value)


_SUMMARY_ROWS: tuple[tuple[str, Callable[[LoadReport], str]], ...] = (
    ("target", lambda r: r.target_url),
    ("requests (ok / errors)", lambda r: f"{r.num_ok} / {r.num_errors}"),
    ("duration (s)", lambda r: f"{r.duration_s:.2f}"),
    ("throughput (req/s)", lambda r: f"{r.throughput_rps:.2f}"),
    ("output tokens/s", lambda r: f"{r.output_tokens_per_s:.1f}"),
    ("output tokens counted by", lambda r: r.output_token_source),
    ("ttft p50 / p95 / p99 (ms)", lambda r: _percentiles(r.ttft_ms)),
    ("e2e p50 / p95 / p99 (ms)", lambda r: _percentiles(r.latency_ms)),
    ("inter-token p50 / p95 / p99 (ms)", lambda r: _percentiles(r.inter_token_ms)),
    ("hit ratio", lambda r: _hit_ratio(r)),
    ("goodput (req/s)", lambda r: _optional(r.vllm.get("request_goodput"))),
    ("errors", lambda r: ", ".join(f"{k}: {v}" for k, v in r.errors.items()) or "-"),
)


def _summary_table(runs: Sequence[LabelledRun]) -> str:
    header = "".join(f"<th>{escape(label)}</th>" for label, _ in runs)
    rows = [f"<tr><th>figure</th>{header}</tr>"]
    for name, value_of in _SUMMARY_ROWS:
        cells = "".join(f"<td>{escape(value_of(report))}</td>" for _, report in runs)
        rows.append(f"<tr><td>{escape(name)}</td>{cells}</tr>")
    return f"<table>{''.join(rows)}</table>"


def _comparison_table(runs: Sequence[LabelledRun], rows: Sequence[ComparisonRow]) -> str:
    primary_label, compare_label = runs[0][0], runs[1][0]
    lines = [
        f"<tr><th>figure</th><th>{escape(compare_label)}</th><th>{escape(primary_label)}</th>"
        f"<th>speedup ({escape(primary_label)} vs {escape(compare_label)})</th></tr>"
    ]
    for row in rows:
        speedup = "-" if row.speedup is None else f"{row.speedup:.2f}x"
        lines.append(
            f"<tr><td>{escape(row.figure)} ({escape(row.unit)})</td>"
            f"<td>{_optional(row.compare)}</td><td>{_optional(row.primary)}</td>"
            f"<td>{speedup}</td></tr>"
        )
    return f"<table>{''.join(lines)}</table>"


def _hit_ratio(report: LoadReport) -> str:
    if report.hit_ratio is None or not report.has_cache_header:
        return "- (no x-hasten-cache header)" if report.num_ok else "-"
    return f"{report.hit_ratio:.1%}"


def _percentiles(summary: Summary | None) -> str:
    if summary is None:
        return "-"
    return f"{summary.p50:.2f} / {summary.p95:.2f} / {summary.p99:.2f}"


def _optional(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _samples(report: LoadReport) -> Samples:
    if report.samples is None:
        raise ValueError("the HTML report needs runs made with keep_samples=True")
    return report.samples


def colored_runs(runs: Sequence[LabelledRun]) -> list[tuple[str, LoadReport, str]]:
    """Each run with its chart color, the same in the HTML and the PNG."""
    return [(label, report, COLORS[i % len(COLORS)]) for i, (label, report) in enumerate(runs)]


def _charts(runs: Sequence[LabelledRun]) -> list[str]:
    colored = colored_runs(runs)
    e2e = [Series(lb, cdf_points(_samples(r).latency_ms), c) for lb, r, c in colored]
    ttft = [Series(lb, cdf_points(_samples(r).ttft_ms), c) for lb, r, c in colored]
    charts = [
        line_chart(
            e2e,
            title="End-to-end latency CDF",
            x_label="latency (ms)",
            y_label="fraction of requests",
            is_step=True,
            y_range=(0.0, 1.0),
            allow_log_x=True,
            is_legend_low=True,
        ),
        line_chart(
            ttft,
            title="Time to first token CDF",
            x_label="TTFT (ms)",
            y_label="fraction of requests",
            is_step=True,
            y_range=(0.0, 1.0),
            allow_log_x=True,
            is_legend_low=True,
        ),
        _ttft_histogram(colored),
    ]
    charts += _timelines(colored)
    return charts


def _ttft_histogram(colored: Sequence[tuple[str, LoadReport, str]]) -> str:
    every = [value for _, report, _ in colored for value in _samples(report).ttft_ms]
    if not every:
        return bar_chart([], title="TTFT histogram", x_label="TTFT (ms)")
    low, high = min(every), max(every)
    series = [
        BarSeries(
            label,
            histogram(_samples(report).ttft_ms, NUM_HISTOGRAM_BINS, low=low, high=high),
            color,
        )
        for label, report, color in colored
    ]
    return bar_chart(series, title="TTFT histogram", x_label="TTFT (ms)")


def _timelines(colored: Sequence[tuple[str, LoadReport, str]]) -> list[str]:
    def series(value_of: Callable[[RatePoint], float | None], *, cached: bool) -> list[Series]:
        return [
            Series(
                label,
                [
                    (point.mid_s, value)
                    for point in rate_points(report.timeline, report.duration_s)
                    if (value := value_of(point)) is not None
                ],
                color,
            )
            for label, report, color in colored
            if report.has_cache_header or not cached
        ]

    x_label = "seconds since the measured phase began (1 s buckets)"
    return [
        line_chart(
            series(lambda p: p.requests_per_s, cached=False),
            title="Throughput",
            x_label=x_label,
            y_label="requests/s",
        ),
        line_chart(
            series(lambda p: p.output_tokens_per_s, cached=False),
            title="Output token throughput",
            x_label=x_label,
            y_label="tokens/s",
        ),
        line_chart(
            series(lambda p: p.hit_ratio, cached=True),
            title="Cache hit ratio (x-hasten-cache: hit; targets that send it)",
            x_label=x_label,
            y_label="hits / successful requests",
            y_range=(0.0, 1.0),
        ),
    ]


def _fields_json(runs: Sequence[LabelledRun]) -> str:
    blocks = {label: {"vllm": r.vllm, "guidellm": r.guidellm} for label, r in runs}
    text = orjson.dumps(blocks, option=orjson.OPT_INDENT_2).decode()
    return f"<pre>{escape(text)}</pre>"

"""``hasten bench --png out.png``: the report's charts in one PNG, drawn with matplotlib.

matplotlib is an optional extra (``pip install 'hasten[report]'``), imported only here and
only when a PNG is asked for, with the Agg backend (no display needed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hasten.errors import ReportDependencyMissing
from hasten.loadgen.html_report import LabelledRun, colored_runs
from hasten.loadgen.report import LoadReport, Samples
from hasten.loadgen.stats import cdf_points
from hasten.loadgen.svg import LOG_SPAN_FACTOR
from hasten.loadgen.timeline import rate_points

FIGURE_SIZE_IN = (12.0, 10.0)
DPI = 80
NUM_HISTOGRAM_BINS = 30


def require_matplotlib() -> None:
    """Raises ReportDependencyMissing before a run whose PNG could not be drawn."""
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ReportDependencyMissing(
            "--png needs matplotlib: pip install 'hasten[report]' (or matplotlib)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def write_png(path: Path, runs: Sequence[LabelledRun], title: str = "hasten bench") -> None:
    """Six panels: e2e and TTFT CDFs, TTFT histogram, req/s, tokens/s and hit ratio."""
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(3, 2, figsize=FIGURE_SIZE_IN, dpi=DPI)
    try:
        figure.suptitle(title)
        colored = colored_runs(runs)
        for label, report, color in colored:
            samples = _samples(report)
            _cdf(axes[0][0], samples.latency_ms, label, color)
            _cdf(axes[0][1], samples.ttft_ms, label, color)
            _timeline(axes[2][0], report, label, color, "requests_per_s")
            _timeline(axes[1][1], report, label, color, "output_tokens_per_s")
            if report.has_cache_header:
                _timeline(axes[2][1], report, label, color, "hit_ratio")
        _histogram(axes[1][0], colored)
        _labels(axes)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)


def _samples(report: LoadReport) -> Samples:
    if report.samples is None:
        raise ValueError("the PNG report needs runs made with keep_samples=True")
    return report.samples


def _cdf(axis: Any, values_ms: Sequence[float], label: str, color: str) -> None:
    points = cdf_points(values_ms)
    if not points:
        return
    xs, ys = [x for x, _ in points], [y for _, y in points]
    axis.step(xs, ys, where="post", label=label, color=color)
    low, high = points[0][0], points[-1][0]
    if low > 0 and high / low > LOG_SPAN_FACTOR:
        axis.set_xscale("log")


def _histogram(axis: Any, colored: Sequence[tuple[str, LoadReport, str]]) -> None:
    series = [(label, _samples(r).ttft_ms, color) for label, r, color in colored]
    finite = [v for _, values, _ in series for v in values if math.isfinite(v)]
    if not finite:
        return
    axis.hist(
        [values for _, values, _ in series],
        bins=NUM_HISTOGRAM_BINS,
        range=(min(finite), max(finite)),
        label=[label for label, _, _ in series],
        color=[color for _, _, color in series],
    )


def _timeline(axis: Any, report: LoadReport, label: str, color: str, name: str) -> None:
    points = [
        (point.mid_s, value)
        for point in rate_points(report.timeline, report.duration_s)
        if (value := getattr(point, name)) is not None
    ]
    if points:
        axis.plot([x for x, _ in points], [y for _, y in points], label=label, color=color)


def _labels(axes: Any) -> None:
    seconds = "seconds since the measured phase began (1 s buckets)"
    for axis, title, x_label, y_label in (
        (axes[0][0], "End-to-end latency CDF", "latency (ms)", "fraction of requests"),
        (axes[0][1], "Time to first token CDF", "TTFT (ms)", "fraction of requests"),
        (axes[1][0], "TTFT histogram", "TTFT (ms)", "requests"),
        (axes[1][1], "Output token throughput", seconds, "tokens/s"),
        (axes[2][0], "Throughput", seconds, "requests/s"),
        (axes[2][1], "Cache hit ratio (x-hasten-cache: hit)", seconds, "hits / successful"),
    ):
        axis.set_title(title)
        axis.set_xlabel(x_label)
        axis.set_ylabel(y_label)
        axis.grid(alpha=0.3)
        if axis.has_data():
            axis.legend()
    axes[2][1].set_ylim(0.0, 1.05)

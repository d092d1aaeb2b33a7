"""Small inline SVG charts (line, step and bar) for the HTML report: no script, no fonts.

Meant for inline use in HTML5, where the parser puts ``<svg>`` in the SVG namespace, so
no ``xmlns`` (nor any other URL) appears.

Every chart has labelled axes with units, tick values and a legend, so it reads on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from hasten.loadgen.stats import Bin

WIDTH_PX = 640
HEIGHT_PX = 300
MARGIN_LEFT_PX = 64
MARGIN_RIGHT_PX = 16
MARGIN_TOP_PX = 30
MARGIN_BOTTOM_PX = 46
NUM_TICKS = 5
# A log axis once the data spans more than this factor (cache hits next to misses).
LOG_SPAN_FACTOR = 30.0


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    color: str


@dataclass(frozen=True, slots=True)
class BarSeries:
    label: str
    bins: Sequence[Bin]
    color: str


@dataclass(frozen=True, slots=True)
class Axis:
    """Maps data values to pixels, linearly or on a log10 scale."""

    low: float
    high: float
    start_px: float
    end_px: float
    is_log: bool = False

    def to_px(self, value: float) -> float:
        low, high, value = self.low, self.high, value
        if self.is_log:
            low, high, value = math.log10(low), math.log10(high), math.log10(max(value, self.low))
        span = high - low or 1.0
        return self.start_px + (value - low) / span * (self.end_px - self.start_px)

    def ticks(self) -> list[float]:
        return log_ticks(self.low, self.high) if self.is_log else nice_ticks(self.low, self.high)


def nice_ticks(low: float, high: float, count: int = NUM_TICKS) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if high <= low:
        return [low]
    raw_step = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2 and 5 times powers of ten within [low, high] (powers only over wide spans)."""
    multipliers = (1, 2, 5) if high / low < 1e4 else (1,)
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for multiplier in multipliers:
            value = multiplier * 10.0**exponent
            if low <= value <= high:
                ticks.append(value)
    return ticks or [low, high]


def format_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) < 0.01:
        return f"{value:.3g}"
    return f"{value:g}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    is_step: bool = False,
    y_range: tuple[float, float] | None = None,
    allow_log_x: bool = False,
    is_legend_low: bool = False,
) -> str:
    """Lines (or steps, for CDFs) over shared axes; an empty chart says there is no data.

    ``is_legend_low`` puts the legend in the bottom right corner, which a CDF leaves empty.
    """
    points = [point for one in series for point in one.points]
    if not points:
        return _empty(title)
    x_axis = _x_axis([x for x, _ in points], allow_log=allow_log_x)
    y_low, y_high = y_range if y_range is not None else _padded([y for _, y in points])
    y_axis = Axis(y_low, y_high, HEIGHT_PX - MARGIN_BOTTOM_PX, MARGIN_TOP_PX)
    shapes = [_polyline(one, x_axis, y_axis, is_step=is_step) for one in series if one.points]
    return _frame(
        title, x_label, y_label, x_axis, y_axis, shapes, series, is_legend_low=is_legend_low
    )


def bar_chart(
    series: Sequence[BarSeries], *, title: str, x_label: str, y_label: str = "requests"
) -> str:
    """Histogram bars; several series share bins and are drawn side by side within each."""
    bins = [one_bin for one in series for one_bin in one.bins]
    if not bins:
        return _empty(title)
    x_axis = Axis(
        min(b.low for b in bins), max(b.high for b in bins), MARGIN_LEFT_PX, _plot_right()
    )
    y_axis = Axis(0.0, max(max(b.count for b in bins), 1) * 1.05, _plot_bottom(), MARGIN_TOP_PX)
    shapes = []
    for index, one in enumerate(series):
        for one_bin in one.bins:
            left_px = x_axis.to_px(one_bin.low)
            width_px = max(x_axis.to_px(one_bin.high) - left_px, 1.0) / len(series)
            top_px = y_axis.to_px(one_bin.count)
            shapes.append(
                f'<rect x="{left_px + index * width_px:.1f}" y="{top_px:.1f}" '
                f'width="{max(width_px - 0.5, 0.5):.1f}" height="{_plot_bottom() - top_px:.1f}" '
                f'fill="{one.color}"><title>{escape(one.label)}: {one_bin.count} in '
                f"[{one_bin.low:.4g}, {one_bin.high:.4g})</title></rect>"
            )
    legend = [Series(one.label, [], one.color) for one in series]
    return _frame(title, x_label, y_label, x_axis, y_axis, shapes, legend)


def _plot_right() -> float:
    return WIDTH_PX - MARGIN_RIGHT_PX


def _plot_bottom() -> float:
    return HEIGHT_PX - MARGIN_BOTTOM_PX


def _x_axis(values: Sequence[float], *, allow_log: bool) -> Axis:
    low, high = min(values), max(values)
    is_log = allow_log and low > 0 and high / low > LOG_SPAN_FACTOR
    if not is_log:
        low, high = _padded(values, floor_at_zero=low >= 0)
    return Axis(low, high, MARGIN_LEFT_PX, _plot_right(), is_log=is_log)


def _padded(values: Sequence[float], *, floor_at_zero: bool = True) -> tuple[float, float]:
    low, high = min(values), max(values)
    if floor_at_zero and low >= 0:
        low = 0.0
    if high == low:
        high = low + 1.0
    return low, high + (high - low) * 0.05


def _polyline(series: Series, x_axis: Axis, y_axis: Axis, *, is_step: bool) -> str:
    coordinates: list[str] = []
    previous_y: float | None = None
    for x, y in series.points:
        x_px, y_px = x_axis.to_px(x), y_axis.to_px(y)
        if is_step and previous_y is not None:
            coordinates.append(f"{x_px:.1f},{previous_y:.1f}")
        coordinates.append(f"{x_px:.1f},{y_px:.1f}")
        previous_y = y_px
    return (
        f'<polyline fill="none" stroke="{series.color}" stroke-width="2" '
        f'points="{" ".join(coordinates)}"><title>{escape(series.label)}</title></polyline>'
    )


def _frame(
    title: str,
    x_label: str,
    y_label: str,
    x_axis: Axis,
    y_axis: Axis,
    shapes: Sequence[str],
    legend: Sequence[Series],
    *,
    is_legend_low: bool = False,
) -> str:
    parts = [
        f'<svg width="{WIDTH_PX}" height="{HEIGHT_PX}" '
        f'viewBox="0 0 {WIDTH_PX} {HEIGHT_PX}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{WIDTH_PX / 2}" y="16" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{escape(title)}</text>',
        *_ticks(x_axis, y_axis),
        f'<rect x="{MARGIN_LEFT_PX}" y="{MARGIN_TOP_PX}" '
        f'width="{_plot_right() - MARGIN_LEFT_PX}" height="{_plot_bottom() - MARGIN_TOP_PX}" '
        'fill="none" stroke="#444"/>',
        *shapes,
        f'<text x="{(MARGIN_LEFT_PX + _plot_right()) / 2}" y="{HEIGHT_PX - 8}" '
        f'text-anchor="middle">{escape(x_label)}{" (log scale)" if x_axis.is_log else ""}</text>',
        f'<text x="14" y="{(MARGIN_TOP_PX + _plot_bottom()) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(MARGIN_TOP_PX + _plot_bottom()) / 2})">'
        f"{escape(y_label)}</text>",
        *_legend(legend, is_low=is_legend_low),
        "</svg>",
    ]
    return "\n".join(parts)


def _ticks(x_axis: Axis, y_axis: Axis) -> list[str]:
    parts = []
    for value in x_axis.ticks():
        x_px = x_axis.to_px(value)
        parts.append(
            f'<line x1="{x_px:.1f}" y1="{MARGIN_TOP_PX}" x2="{x_px:.1f}" y2="{_plot_bottom()}" '
            f'stroke="#ddd"/><text x="{x_px:.1f}" y="{_plot_bottom() + 14}" '
            f'text-anchor="middle">{format_tick(value)}</text>'
        )
    for value in y_axis.ticks():
        y_px = y_axis.to_px(value)
        parts.append(
            f'<line x1="{MARGIN_LEFT_PX}" y1="{y_px:.1f}" x2="{_plot_right()}" y2="{y_px:.1f}" '
            f'stroke="#ddd"/><text x="{MARGIN_LEFT_PX - 4}" y="{y_px + 4:.1f}" '
            f'text-anchor="end">{format_tick(value)}</text>'
        )
    return parts


def _legend(series: Sequence[Series], *, is_low: bool) -> list[str]:
    parts = []
    first_px = _plot_bottom() - 8 - 16 * len(series) + 12 if is_low else MARGIN_TOP_PX + 12
    for index, one in enumerate(series):
        y_px = first_px + index * 16
        x_px = _plot_right() - 120
        parts.append(
            f'<rect x="{x_px}" y="{y_px - 8}" width="12" height="10" fill="{one.color}"/>'
            f'<text x="{x_px + 16}" y="{y_px + 1}">{escape(one.label)}</text>'
        )
    return parts


def _empty(title: str) -> str:
    return (
        f'<svg width="{WIDTH_PX}" height="60" '
        f'viewBox="0 0 {WIDTH_PX} 60" font-family="sans-serif" font-size="12">'
        f'<text x="10" y="20" font-weight="bold">{escape(title)}</text>'
        '<text x="10" y="44">no data in this run</text></svg>'
    )

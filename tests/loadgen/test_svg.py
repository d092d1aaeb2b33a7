"""The report's inline SVG charts: axes, ticks, legends, and no URLs."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.stats import histogram
from hasten.loadgen.svg import (
    BarSeries,
    Series,
    bar_chart,
    format_tick,
    line_chart,
    log_ticks,
    nice_ticks,
)


@given(st.floats(-1e6, 1e6), st.floats(1e-3, 1e6))
def test_nice_ticks_cover_the_range_in_order(low: float, span: float) -> None:
    ticks = nice_ticks(low, low + span)
    assert ticks == sorted(ticks) and len(ticks) >= 2
    assert all(low - span * 1e-6 <= tick <= low + span * (1 + 1e-6) for tick in ticks)


def test_log_ticks_are_one_two_five() -> None:
    assert log_ticks(0.5, 30.0) == [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
    assert format_tick(4000.0) == "4,000" and format_tick(0.5) == "0.5"


def test_line_chart_is_well_formed_with_legend_and_labels() -> None:
    svg = line_chart(
        [Series("hasten", [(1.0, 0.5), (200.0, 1.0)], "#111"), Series("direct", [], "#222")],
        title="CDF",
        x_label="latency (ms)",
        y_label="fraction",
        is_step=True,
        allow_log_x=True,
    )
    root = ElementTree.fromstring(svg)
    texts = [element.text for element in root.iter("text")]
    assert {"CDF", "hasten", "direct", "fraction", "latency (ms) (log scale)"} <= set(texts)
    assert len(list(root.iter("polyline"))) == 1
    assert not re.search(r"https?://", svg)


def test_bar_chart_draws_one_rect_per_bin_and_series() -> None:
    bins = histogram([1.0, 2.0, 3.0], 3)
    svg = bar_chart(
        [BarSeries("a", bins, "#111"), BarSeries("b", bins, "#222")], title="h", x_label="x"
    )
    rects = [r for r in ElementTree.fromstring(svg).iter("rect") if r.find("title") is not None]
    assert len(rects) == 6


def test_empty_chart_says_so() -> None:
    assert "no data" in line_chart([], title="t", x_label="x", y_label="y")

"""hasten.dashboard.window: the rolling window, driven by a hand-held clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hasten.dashboard.histogram import bin_of, bin_value_ms
from hasten.dashboard.window import RollingWindow, WindowConfig


@dataclass(frozen=True, slots=True)
class Outcome:
    """A RequestOutcome-like record: the fields the window reads."""

    request_id: str
    cache: str = "miss"
    deployment: str | None = "sim"
    status: int = 200
    gateway_ms: float = 1.0
    upstream_ttfb_ms: float | None = 50.0
    ttft_ms: float | None = 52.0
    e2e_ms: float = 80.0
    is_upstream_call: bool = True
    saved_s: float | None = None

    # The seam's records carry seconds; the tests read better in milliseconds.
    @property
    def gateway_s(self) -> float:
        return self.gateway_ms / 1000.0

    @property
    def upstream_ttfb_s(self) -> float | None:
        return None if self.upstream_ttfb_ms is None else self.upstream_ttfb_ms / 1000.0

    @property
    def ttft_s(self) -> float | None:
        return None if self.ttft_ms is None else self.ttft_ms / 1000.0

    @property
    def e2e_s(self) -> float:
        return self.e2e_ms / 1000.0


def rounded(value_ms: float) -> float:
    return round(bin_value_ms(bin_of(value_ms)), 2)


def test_an_empty_window() -> None:
    snapshot = RollingWindow(WindowConfig(span_s=5)).snapshot(100.0)
    assert snapshot["requests"] == 0 and snapshot["by_cache"] == {}
    assert snapshot["served_ttft_ms"] == {"count": 0, "p50": None, "p95": None, "p99": None}
    series: Any = snapshot["series"]
    assert series["t"] == [-4, -3, -2, -1, 0] and series["requests"] == [0] * 5
    assert snapshot["slowest"] == []


def test_counts_rates_and_percentiles() -> None:
    window = RollingWindow(WindowConfig(span_s=60, rate_span_s=10))
    ttfts = [float(v) for v in range(10, 110)]  # 100 requests over 10 seconds
    for i, ttft in enumerate(ttfts):
        cache = "hit" if i % 4 == 0 else "miss"
        ttfb = None if cache == "hit" else ttft - 2
        record = Outcome(f"r{i}", cache=cache, upstream_ttfb_ms=ttfb, ttft_ms=ttft, e2e_ms=ttft)
        window.observe(record, 1000.0 + i / 10)
    snapshot: Any = window.snapshot(1009.9)
    assert snapshot["requests"] == 100
    assert snapshot["by_cache"] == {"hit": 25, "miss": 75}
    assert snapshot["requests_per_s"] == 10.0
    assert snapshot["served_ttft_ms"] == {
        "count": 100,
        "p50": rounded(59.0),
        "p95": rounded(104.0),
        "p99": rounded(108.0),
    }
    ttfbs = sorted(t - 2 for i, t in enumerate(ttfts) if i % 4)
    assert snapshot["upstream_ttfb_ms"]["count"] == 75
    assert snapshot["upstream_ttfb_ms"]["p50"] == rounded(ttfbs[37])  # rank ceil(37.5)
    series = snapshot["series"]
    assert series["requests"][-10:] == [10] * 10 and sum(series["requests"]) == 100
    assert sum(series["hits"]) == 25


def test_direct_upstream_counts_each_call_once() -> None:
    window = RollingWindow(WindowConfig(span_s=10))
    window.observe(Outcome("leader", upstream_ttfb_ms=40.0), 1.0)
    for i in range(5):  # coalesced: the leader's TTFB, but no call of their own
        record = Outcome(f"c{i}", cache="coalesced", upstream_ttfb_ms=40.0, is_upstream_call=False)
        window.observe(record, 1.0)
    snapshot: Any = window.snapshot(2.0)
    assert snapshot["upstream_ttfb_ms"]["count"] == 1
    assert snapshot["served_ttft_ms"]["count"] == 6
    assert snapshot["by_cache"] == {"miss": 1, "coalesced": 5}


def test_seconds_leave_the_window_and_the_totals() -> None:
    window = RollingWindow(WindowConfig(span_s=5, rate_span_s=1))
    window.observe(Outcome("old", e2e_ms=900.0, ttft_ms=900.0), 10.2)
    window.observe(Outcome("new", e2e_ms=100.0, ttft_ms=100.0), 13.5)
    assert window.snapshot(14.0)["requests"] == 2
    snapshot: Any = window.snapshot(15.0)  # second 10 is now 5 s old: out
    assert snapshot["requests"] == 1
    assert snapshot["served_ttft_ms"]["p99"] == rounded(100.0)
    assert [row["request_id"] for row in snapshot["slowest"]] == ["new"]
    assert window.snapshot(15.0)["requests_per_s"] == 0.0
    # The ring slot of second 10 is reused by second 20 without double counting.
    window.observe(Outcome("later", cache="hit"), 20.0)
    later: Any = window.snapshot(20.0)
    assert later["requests"] == 1 and later["by_cache"] == {"hit": 1}


def test_a_reused_slot_retires_what_it_held_even_without_a_snapshot() -> None:
    window = RollingWindow(WindowConfig(span_s=3))
    for second in range(10):
        window.observe(Outcome(f"r{second}", cache="miss"), float(second))
    snapshot: Any = window.snapshot(9.0)
    assert snapshot["requests"] == 3 and snapshot["served_e2e_ms"]["count"] == 3


def test_slowest_requests_with_their_breakdown() -> None:
    window = RollingWindow(WindowConfig(span_s=60, num_slowest=3))
    for i in range(20):
        e2e = float(100 + (i * 37) % 20 * 10)
        window.observe(Outcome(f"r{i}", e2e_ms=e2e, gateway_ms=0.5, deployment=f"d{i}"), 50 + i)
    rows: Any = window.snapshot(70.0)["slowest"]
    assert [row["e2e_ms"] for row in rows] == [290.0, 280.0, 270.0]
    first = rows[0]
    i = next(i for i in range(20) if 100 + (i * 37) % 20 * 10 == 290)
    assert first == {
        "request_id": f"r{i}",
        "cache": "miss",
        "deployment": f"d{i}",
        "status": 200,
        "gateway_ms": 0.5,
        "upstream_ttfb_ms": 50.0,
        "ttft_ms": 52.0,
        "e2e_ms": 290.0,
        "age_s": 70.0 - (50 + i),
    }


def test_each_second_keeps_only_its_slowest() -> None:
    window = RollingWindow(WindowConfig(span_s=10, num_slowest=2))
    for i, e2e in enumerate([5.0, 50.0, 1.0, 500.0, 7.0]):
        window.observe(Outcome(f"r{i}", e2e_ms=e2e), 3.5)
    rows: Any = window.snapshot(4.0)["slowest"]
    assert [row["request_id"] for row in rows] == ["r3", "r1"]


def test_per_second_percentiles_in_the_series() -> None:
    window = RollingWindow(WindowConfig(span_s=4))
    for value in (10.0, 20.0, 30.0, 40.0):
        window.observe(Outcome("a", ttft_ms=value, upstream_ttfb_ms=value / 2), 7.1)
    series: Any = window.snapshot(8.0)["series"]
    assert series["t"] == [-3, -2, -1, 0]
    assert series["ttft_p50_ms"] == [None, None, rounded(20.0), None]
    assert series["ttft_p95_ms"][2] == rounded(40.0)
    assert series["ttfb_p50_ms"][2] == rounded(10.0)


def test_lifetime_totals_outlive_the_window() -> None:
    window = RollingWindow(WindowConfig(span_s=2))
    window.observe(Outcome("a", cache="hit", saved_s=0.25), 1.0)
    window.observe(Outcome("b", cache="coalesced", saved_s=0.5), 1.0)
    window.observe(Outcome("c"), 9.0)
    assert window.snapshot(9.0)["requests"] == 1
    assert window.lifetime.by_cache == {"hit": 1, "coalesced": 1, "miss": 1}
    assert window.lifetime.saved_s == 0.75

"""hasten.dashboard.data: the snapshot's totals, tiers and engine view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hasten.app import HastenApp
from hasten.dashboard.data import TokenRate, build_snapshot
from hasten.dashboard.window import RollingWindow, WindowConfig
from tests.support.gateway import make_config


@dataclass(frozen=True, slots=True)
class Outcome:
    request_id: str
    cache: str
    saved_s: float | None = None
    deployment: str | None = "sim"
    status: int = 200
    gateway_s: float = 0.001
    upstream_ttfb_s: float | None = None
    is_upstream_call: bool = False
    ttft_s: float | None = 0.01
    e2e_s: float = 0.02


class Engine:
    def status(self) -> dict[str, object]:
        return {"state": "ready", "restarts": 2, "model": "smollm2"}


def test_token_rate_from_the_counters_growth() -> None:
    rate = TokenRate()
    assert rate.update(100, 10.0) is None  # one sample is no rate yet
    assert rate.update(160, 12.0) == 30.0
    assert rate.update(40, 13.0) == 30.0  # the child restarted: the counter fell
    assert rate.update(90, 14.0) == 50.0
    assert rate.update(90, 14.0) == 50.0  # no time passed: nothing new to say


async def test_totals_tiers_and_deployments() -> None:
    app = HastenApp(make_config({"sim": "http://127.0.0.1:9/v1"}))
    gateway = await app.startup()
    try:
        window = RollingWindow(WindowConfig(span_s=10))
        for i, (cache, saved_s) in enumerate([("hit", 0.2), ("hit", 0.3), ("miss", None)]):
            window.observe(Outcome(f"r{i}", cache, saved_s), 5.0)
        window.observe(Outcome("r3", "semantic", 0.5), 5.0)
        snapshot: Any = build_snapshot(
            gateway.pipeline, window, Engine(), TokenRate(), now_s=6.0, wall_s=1000.5
        )
    finally:
        await app.shutdown()
    assert snapshot["generated_at_ms"] == 1000500
    totals = snapshot["totals"]
    assert totals["requests"] == 4 and totals["hit_ratio"] == 0.75
    assert totals["latency_saved_s"] == 1.0
    assert totals["in_flight"] == 0 and totals["hedges"] == 0
    tiers = {row["cache"]: (row["requests"], row["ratio"]) for row in snapshot["tiers"]}
    assert tiers == {
        "hit": (2, 0.5),
        "semantic": (1, 0.25),
        "coalesced": (0, 0.0),
        "miss": (1, 0.25),
        "bypass": (0, 0.0),
    }
    assert snapshot["deployments"] == []  # no model has been routed yet
    # No scrape has sampled the child: its supervisor's state, without queue or speed.
    assert snapshot["engine"] == {"state": "ready", "restarts": 2}
    assert snapshot["window"]["requests"] == 4

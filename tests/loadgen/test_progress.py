"""The rich progress bar: what it shows, and when it is off."""

from __future__ import annotations

import io

from rich.console import Console

from hasten.loadgen.progress import (
    ProgressSnapshot,
    RichProgress,
    completed_fraction,
    live_percentiles_ms,
    progress_for,
)


def _snapshot(**changes: object) -> ProgressSnapshot:
    values: dict[str, object] = {
        "phase": "run",
        "num_done": 40,
        "num_errors": 2,
        "num_hits": 10,
        "elapsed_s": 2.0,
        "num_planned": 80,
        "duration_s": None,
        "latency_p50_ms": 12.5,
        "latency_p99_ms": 98.25,
        "ttft_p50_ms": 3.0,
        "ttft_p99_ms": 7.5,
    }
    values.update(changes)
    return ProgressSnapshot(**values)  # type: ignore[arg-type]


def test_bar_renders_counts_and_live_percentiles() -> None:
    out = io.StringIO()
    bar = RichProgress(Console(file=out, force_terminal=True, width=200))
    bar.update(_snapshot(), final=True)
    bar.close()
    text = out.getvalue()
    assert "40/80 req" in text and "err 2" in text and "hit 25%" in text
    assert "e2e p50 12.5  p99 98.2 ms" in text
    assert "ttft p50 3.0  p99 7.5 ms" in text
    assert "50%" in text


def test_bar_starts_again_for_the_next_phase() -> None:
    out = io.StringIO()
    bar = RichProgress(Console(file=out, force_terminal=True, width=200))
    bar.update(_snapshot(phase="warmup", num_done=3, num_planned=3), final=True)
    bar.close()
    bar.update(_snapshot(latency_p50_ms=None, latency_p99_ms=None), final=True)
    bar.close()
    text = out.getvalue()
    assert "warmup" in text and "3/3 req" in text and "e2e p50 -" in text


def test_off_when_asked_or_not_a_terminal() -> None:
    assert progress_for(io.StringIO()) is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_for(Terminal()), RichProgress)
    assert progress_for(Terminal(), enabled=False) is None


def test_live_percentiles_use_the_recent_window() -> None:
    assert live_percentiles_ms([]) == (None, None)
    values_s = [10.0] * 100 + [0.001] * 50
    p50_ms, p99_ms = live_percentiles_ms(values_s, window=50)
    assert p50_ms == p99_ms == 1.0


def test_completed_fraction_takes_whichever_bound_is_nearer() -> None:
    assert completed_fraction(_snapshot(num_done=10, num_planned=100, duration_s=4.0)) == 0.5
    assert completed_fraction(_snapshot(num_planned=None)) is None

"""The live progress bar on stderr (rich), redrawn at most ~10 times a second.

It shows done/planned, errors, hit ratio and p50/p99 of end-to-end latency and TTFT over
the most recent ``LIVE_WINDOW`` successful requests: sorting a bounded tail at each redraw
keeps the cost flat however long the run gets, and a recent window is what a live figure
should show anyway (the final report has the whole run).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from hasten.loadgen.stats import percentile

MIN_REDRAW_INTERVAL_S = 0.1
LIVE_WINDOW = 2048
MS_PER_S = 1000.0
# The bar's task counts thousandths of the run, whichever bound (count or time) ends it.
BAR_UNITS = 1000


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    phase: str
    num_done: int
    num_errors: int
    num_hits: int
    elapsed_s: float
    num_planned: int | None
    duration_s: float | None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None


class ProgressSink(Protocol):
    def update(self, snapshot: ProgressSnapshot, *, final: bool = False) -> None: ...

    def close(self) -> None: ...


def live_percentiles_ms(
    values_s: Sequence[float], window: int = LIVE_WINDOW
) -> tuple[float | None, float | None]:
    """p50 and p99, in ms, of the last ``window`` values (seconds); Nones when there are none."""
    recent = sorted(values_s[-window:])
    if not recent:
        return None, None
    return percentile(recent, 0.50) * MS_PER_S, percentile(recent, 0.99) * MS_PER_S


def completed_fraction(snapshot: ProgressSnapshot) -> float | None:
    """How far along the run is by whichever bound ends it first; None when unknown."""
    fractions = []
    if snapshot.num_planned:
        fractions.append(snapshot.num_done / snapshot.num_planned)
    if snapshot.duration_s:
        fractions.append(snapshot.elapsed_s / snapshot.duration_s)
    return min(max(fractions), 1.0) if fractions else None


def status_text(snapshot: ProgressSnapshot) -> str:
    """Everything but the bar, on one line."""
    rate_rps = snapshot.num_done / snapshot.elapsed_s if snapshot.elapsed_s > 0 else 0.0
    planned = f"/{snapshot.num_planned}" if snapshot.num_planned else ""
    hit_ratio = snapshot.num_hits / snapshot.num_done if snapshot.num_done else 0.0
    parts = [
        f"{snapshot.num_done}{planned} req",
        f"{rate_rps:.1f} req/s",
        f"err {snapshot.num_errors}",
        f"hit {hit_ratio:.0%}",
        f"e2e {_pair(snapshot.latency_p50_ms, snapshot.latency_p99_ms)}",
    ]
    if snapshot.ttft_p50_ms is not None:
        parts.append(f"ttft {_pair(snapshot.ttft_p50_ms, snapshot.ttft_p99_ms)}")
    parts.append(f"{snapshot.elapsed_s:.1f} s")
    return "  ".join(parts)


def _pair(p50_ms: float | None, p99_ms: float | None) -> str:
    if p50_ms is None or p99_ms is None:
        return "p50 -  p99 -"
    return f"p50 {p50_ms:.1f}  p99 {p99_ms:.1f} ms"


class RichProgress:
    """One rich bar per phase; throttled so a fast run does not spend its time drawing."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._last_draw_s = float("-inf")

    def update(self, snapshot: ProgressSnapshot, *, final: bool = False) -> None:
        now_s = time.monotonic()
        if not final and now_s - self._last_draw_s < MIN_REDRAW_INTERVAL_S:
            return
        self._last_draw_s = now_s
        progress, task = self._started(snapshot.phase)
        fraction = completed_fraction(snapshot)
        progress.update(
            task,
            total=None if fraction is None else BAR_UNITS,
            completed=0 if fraction is None else fraction * BAR_UNITS,
            status=status_text(snapshot),
        )
        progress.refresh()

    def _started(self, phase: str) -> tuple[Progress, TaskID]:
        if self._progress is None or self._task is None:
            self._progress = Progress(
                TextColumn("{task.description:<7}"),
                BarColumn(bar_width=24),
                TaskProgressColumn(),
                TextColumn("{task.fields[status]}"),
                console=self._console,
                auto_refresh=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(phase, total=BAR_UNITS, status="")
        return self._progress, self._task

    def close(self) -> None:
        """Ends the phase's bar (left on screen); the next update starts a new one."""
        if self._progress is not None:
            self._progress.stop()
        self._progress = None
        self._task = None


def progress_for(stream: TextIO | None = None, *, enabled: bool = True) -> RichProgress | None:
    """A bar on ``stream`` (stderr by default) when enabled and it is a terminal."""
    target = sys.stderr if stream is None else stream
    if not enabled or not target.isatty():
        return None
    return RichProgress(Console(file=target))

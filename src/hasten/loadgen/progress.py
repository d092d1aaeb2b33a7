"""A dependency-free progress bar for stderr, redrawn at most ~10 times a second."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Protocol, TextIO

MIN_REDRAW_INTERVAL_S = 0.1
BAR_WIDTH = 24


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    phase: str
    num_done: int
    num_errors: int
    num_hits: int
    elapsed_s: float
    num_planned: int | None
    duration_s: float | None


class ProgressSink(Protocol):
    def update(self, snapshot: ProgressSnapshot, *, final: bool = False) -> None: ...

    def close(self) -> None: ...


def completed_fraction(snapshot: ProgressSnapshot) -> float | None:
    """How far along the run is by whichever bound ends it first; None when unknown."""
    fractions = []
    if snapshot.num_planned:
        fractions.append(snapshot.num_done / snapshot.num_planned)
    if snapshot.duration_s:
        fractions.append(snapshot.elapsed_s / snapshot.duration_s)
    return min(max(fractions), 1.0) if fractions else None


def render(snapshot: ProgressSnapshot, width: int = BAR_WIDTH) -> str:
    fraction = completed_fraction(snapshot)
    if fraction is None:
        bar = ""
    else:
        filled = int(fraction * width)
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%} "
    rate_rps = snapshot.num_done / snapshot.elapsed_s if snapshot.elapsed_s > 0 else 0.0
    planned = f"/{snapshot.num_planned}" if snapshot.num_planned else ""
    hit_ratio = snapshot.num_hits / snapshot.num_done if snapshot.num_done else 0.0
    return (
        f"{snapshot.phase:<7} {bar}{snapshot.num_done}{planned} req  {rate_rps:7.1f} req/s"
        f"  err {snapshot.num_errors}  hit {hit_ratio:4.0%}  {snapshot.elapsed_s:6.1f} s"
    )


class ProgressBar:
    """Rewrites one terminal line; throttled so a fast run does not spend its time drawing."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last_draw_s = float("-inf")
        self._last_width = 0

    def update(self, snapshot: ProgressSnapshot, *, final: bool = False) -> None:
        now_s = time.monotonic()
        if not final and now_s - self._last_draw_s < MIN_REDRAW_INTERVAL_S:
            return
        self._last_draw_s = now_s
        line = render(snapshot)
        padding = " " * max(self._last_width - len(line), 0)
        self._last_width = len(line)
        self._stream.write(f"\r{line}{padding}")
        self._stream.flush()

    def close(self) -> None:
        if self._last_width:
            self._stream.write("\n")
            self._stream.flush()


def progress_for(stream: TextIO | None = None, *, enabled: bool = True) -> ProgressBar | None:
    """A bar on ``stream`` (stderr by default) when enabled and it is a terminal."""
    target = sys.stderr if stream is None else stream
    if not enabled or not target.isatty():
        return None
    return ProgressBar(target)

"""Per-run accumulation of raw measurements, kept as flat lists of floats.

One Recorder per phase (warmup, measured); nothing here outlives a run.
"""

from __future__ import annotations

from collections import Counter

CACHE_HEADER = "x-hasten-cache"
CACHE_ABSENT = "absent"


class Recorder:
    """Raw samples in seconds plus counters; appended to by request coroutines."""

    __slots__ = (
        "cache_counts",
        "errors",
        "gaps_s",
        "latency_s",
        "num_done",
        "num_hits",
        "num_ok",
        "num_output_tokens",
        "ttft_s",
    )

    def __init__(self) -> None:
        self.ttft_s: list[float] = []
        self.latency_s: list[float] = []
        self.gaps_s: list[float] = []
        self.num_done = 0
        self.num_ok = 0
        self.num_hits = 0
        self.num_output_tokens = 0
        self.errors: Counter[str] = Counter()
        self.cache_counts: Counter[str] = Counter()

    @property
    def num_errors(self) -> int:
        return self.num_done - self.num_ok

    def record_ok(
        self, *, ttft_s: float | None, latency_s: float, num_tokens: int, cache: str | None
    ) -> None:
        self.num_done += 1
        self.num_ok += 1
        if ttft_s is not None:
            self.ttft_s.append(ttft_s)
        self.latency_s.append(latency_s)
        self.num_output_tokens += num_tokens
        status = cache.lower() if cache else CACHE_ABSENT
        self.cache_counts[status] += 1
        if status == "hit":
            self.num_hits += 1

    def record_error(self, kind: str) -> None:
        """``kind`` is the HTTP status as text, or the exception class for transport errors."""
        self.num_done += 1
        self.errors[kind] += 1

"""Per-run accumulation of raw measurements, kept as flat lists of floats.

One Recorder per phase (warmup, measured); nothing here outlives a run.
"""

from __future__ import annotations

import math
import time
from collections import Counter

CACHE_HEADER = "x-hasten-cache"
CACHE_ABSENT = "absent"

# Stands in for the TTFT of a stream that carried no content: comparisons with it are all
# False, so such a request meets no TTFT objective and lands in no TTFT chart.
NO_TTFT = math.nan


class Recorder:
    """Raw samples in seconds plus counters; appended to by request coroutines.

    The ``request_*`` lists are aligned: one entry per successful request, in completion
    order, so per-request figures (TPOT, goodput, per-second buckets) can be derived later.
    """

    __slots__ = (
        "cache_counts",
        "errors",
        "gaps_s",
        "latency_s",
        "num_chunk_counted",
        "num_done",
        "num_hits",
        "num_input_tokens",
        "num_ok",
        "num_output_tokens",
        "origin_s",
        "request_done_s",
        "request_is_hit",
        "request_output_tokens",
        "request_ttft_s",
        "ttft_s",
    )

    def __init__(self, origin_s: float | None = None) -> None:
        """``origin_s`` (perf_counter) is the phase start the completion times count from."""
        self.origin_s = time.perf_counter() if origin_s is None else origin_s
        self.ttft_s: list[float] = []
        self.latency_s: list[float] = []
        self.gaps_s: list[float] = []
        self.request_ttft_s: list[float] = []
        self.request_done_s: list[float] = []
        self.request_output_tokens: list[int] = []
        self.request_is_hit: list[bool] = []
        self.num_done = 0
        self.num_ok = 0
        self.num_hits = 0
        self.num_output_tokens = 0
        self.num_input_tokens = 0
        self.num_chunk_counted = 0
        self.errors: Counter[str] = Counter()
        self.cache_counts: Counter[str] = Counter()

    @property
    def num_errors(self) -> int:
        return self.num_done - self.num_ok

    def record_ok(
        self,
        *,
        ttft_s: float | None,
        latency_s: float,
        num_tokens: int,
        cache: str | None,
        num_input_tokens: int = 0,
        is_chunk_count: bool = False,
    ) -> None:
        """``is_chunk_count``: ``num_tokens`` counts content chunks, the server gave no usage."""
        self.num_done += 1
        self.num_ok += 1
        if ttft_s is not None:
            self.ttft_s.append(ttft_s)
        self.latency_s.append(latency_s)
        self.request_ttft_s.append(NO_TTFT if ttft_s is None else ttft_s)
        self.request_done_s.append(time.perf_counter() - self.origin_s)
        self.request_output_tokens.append(num_tokens)
        self.num_output_tokens += num_tokens
        self.num_input_tokens += num_input_tokens
        self.num_chunk_counted += is_chunk_count
        status = cache.lower() if cache else CACHE_ABSENT
        self.cache_counts[status] += 1
        is_hit = status == "hit"
        self.request_is_hit.append(is_hit)
        if is_hit:
            self.num_hits += 1

    def record_error(self, kind: str) -> None:
        """``kind`` is the HTTP status as text, or the exception class for transport errors."""
        self.num_done += 1
        self.errors[kind] += 1

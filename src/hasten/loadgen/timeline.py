"""Per-second buckets of a run: requests, output tokens and cache hits over time (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class SecondBucket:
    """What completed in [second, second + 1) after the measured phase began."""

    second: int
    num_ok: int
    num_output_tokens: int
    num_hits: int

    @property
    def hit_ratio(self) -> float | None:
        return self.num_hits / self.num_ok if self.num_ok else None

    def to_dict(self) -> dict[str, int | float | None]:
        return {**asdict(self), "hit_ratio": self.hit_ratio}


def per_second(
    done_s: Sequence[float], output_tokens: Sequence[int], is_hit: Sequence[bool]
) -> list[SecondBucket]:
    """Buckets 0..last completion, empty seconds included (a stall shows as a zero)."""
    if not (len(done_s) == len(output_tokens) == len(is_hit)):
        raise ValueError("per-request lists must be aligned")
    if not done_s:
        return []
    num_seconds = math.floor(max(max(done_s), 0.0)) + 1
    num_ok = [0] * num_seconds
    num_tokens = [0] * num_seconds
    num_hits = [0] * num_seconds
    for at_s, tokens, hit in zip(done_s, output_tokens, is_hit, strict=True):
        second = max(math.floor(at_s), 0)
        num_ok[second] += 1
        num_tokens[second] += tokens
        num_hits[second] += hit
    return [
        SecondBucket(second, num_ok[second], num_tokens[second], num_hits[second])
        for second in range(num_seconds)
    ]


# A final bucket covering less of a second than this is left off the rate charts: scaling
# a few milliseconds of completions up to a per-second rate is noise, not a measurement.
MIN_PARTIAL_BUCKET_S = 0.25


@dataclass(frozen=True, slots=True)
class RatePoint:
    """One bucket as rates, plotted at the middle of the time it covers."""

    mid_s: float
    requests_per_s: float
    output_tokens_per_s: float
    hit_ratio: float | None


def rate_points(buckets: Sequence[SecondBucket], duration_s: float) -> list[RatePoint]:
    """Per-second rates; the run's last, partial second is scaled by the part it covers."""
    points: list[RatePoint] = []
    for bucket in buckets:
        covered_s = min(1.0, duration_s - bucket.second) if duration_s > bucket.second else 1.0
        if covered_s < MIN_PARTIAL_BUCKET_S:
            continue
        points.append(
            RatePoint(
                mid_s=bucket.second + covered_s / 2,
                requests_per_s=bucket.num_ok / covered_s,
                output_tokens_per_s=bucket.num_output_tokens / covered_s,
                hit_ratio=bucket.hit_ratio,
            )
        )
    return points

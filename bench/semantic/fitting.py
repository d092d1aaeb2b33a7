"""Fitting the calibration's tables (bench/semantic/calibrate.py): the Wilson lower bound and
the isotonic score -> precision table. The gateway only reads the fitted numbers
(``hasten.semantic.calibrated``)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def wilson_lower(num_correct: int, num_total: int, *, z: float = 1.645) -> float:
    """One-sided lower confidence bound of a proportion (Wilson score interval)."""
    if num_total == 0:
        return 0.0
    p = num_correct / num_total
    denominator = 1.0 + z * z / num_total
    center = p + z * z / (2 * num_total)
    spread = z * math.sqrt(p * (1 - p) / num_total + z * z / (4 * num_total * num_total))
    return max(0.0, (center - spread) / denominator)


def isotonic_bins(
    scores: Sequence[float], is_correct: Sequence[bool], *, min_per_bin: int, z: float = 1.645
) -> tuple[tuple[float, float], ...]:
    """The score -> precision table: isotonic regression (pool adjacent violators) of the
    calibration outcomes on their scores, blocks with fewer than ``min_per_bin`` examples
    pooled with the block below them, each block's precision replaced by its Wilson lower
    bound and the bounds made non-decreasing from the top down (a block is never trusted
    more than one above it). Rows: (lowest score of the block, bound), ascending."""
    blocks: list[list[float]] = []  # [num_correct, num_total, lowest score]
    for score, ok in sorted(zip(scores, is_correct, strict=True), key=lambda item: item[0]):
        blocks.append([1.0 if ok else 0.0, 1.0, score])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] >= blocks[-1][0] * blocks[-2][1]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
    pooled: list[list[float]] = []
    for block in reversed(blocks):  # from the top: small blocks join the one below
        if pooled and pooled[-1][1] < min_per_bin:
            pooled[-1][0] += block[0]
            pooled[-1][1] += block[1]
            pooled[-1][2] = block[2]
        else:
            pooled.append(list(block))
    table: list[tuple[float, float]] = []
    for num_correct, num_total, lowest in pooled:
        bound = wilson_lower(int(num_correct), int(num_total), z=z)
        if table:
            bound = min(bound, table[-1][1])
        table.append((lowest, bound))
    return tuple(reversed(table))

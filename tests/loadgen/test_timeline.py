"""Per-second buckets and the rates the report charts draw from them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.timeline import SecondBucket, per_second, rate_points


def test_buckets_include_empty_seconds() -> None:
    buckets = per_second([0.2, 0.9, 2.5], [3, 4, 5], [True, False, True])
    assert buckets == [
        SecondBucket(0, 2, 7, 1),
        SecondBucket(1, 0, 0, 0),
        SecondBucket(2, 1, 5, 1),
    ]
    assert buckets[0].hit_ratio == 0.5 and buckets[1].hit_ratio is None
    assert buckets[0].to_dict()["hit_ratio"] == 0.5
    assert per_second([], [], []) == []
    with pytest.raises(ValueError):
        per_second([0.1], [], [])


@given(st.lists(st.tuples(st.floats(0, 50), st.integers(0, 9), st.booleans()), max_size=80))
def test_buckets_conserve_counts(rows: list[tuple[float, int, bool]]) -> None:
    buckets = per_second([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    assert sum(b.num_ok for b in buckets) == len(rows)
    assert sum(b.num_output_tokens for b in buckets) == sum(r[1] for r in rows)
    assert sum(b.num_hits for b in buckets) == sum(r[2] for r in rows)
    assert [b.second for b in buckets] == list(range(len(buckets)))


def test_rate_points_scale_the_partial_last_second() -> None:
    buckets = per_second([0.5, 0.6, 1.2], [10, 10, 4], [False, False, True])
    points = rate_points(buckets, duration_s=1.5)
    assert [(p.mid_s, p.requests_per_s, p.output_tokens_per_s) for p in points] == [
        (0.5, 2.0, 20.0),
        (1.25, 2.0, 8.0),
    ]
    # A final sliver under a quarter second is left off rather than blown up.
    assert len(rate_points(buckets, duration_s=1.1)) == 1

"""Goodput objectives as vLLM's benchmark parses and applies them."""

from __future__ import annotations

import functools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.slo import count_good, parse_goodput, request_tpot_s


def test_parse_goodput_reads_vllm_syntax() -> None:
    assert parse_goodput(["ttft:500", "TPOT:50", "e2el:2000.5"]) == {
        "ttft": 500.0,
        "tpot": 50.0,
        "e2el": 2000.5,
    }
    assert parse_goodput([]) == {}


@pytest.mark.parametrize("pair", ["ttft", "latency:5", "ttft:abc", "ttft:-1", "e2el:nan"])
def test_parse_goodput_rejects(pair: str) -> None:
    with pytest.raises(ValueError):
        parse_goodput([pair])


def test_tpot_excludes_the_first_token() -> None:
    assert request_tpot_s(1.0, 0.2, 5) == pytest.approx(0.2)
    assert request_tpot_s(1.0, 0.2, 1) == 0.0
    assert request_tpot_s(1.0, 0.2, 0) == 0.0


def test_count_good_needs_every_objective() -> None:
    ttft_s = [0.1, 0.3, 0.1, math.nan]
    latency_s = [0.5, 0.5, 2.5, 0.5]
    tokens = [5, 5, 5, 5]
    good = functools.partial(count_good, ttft_s=ttft_s, latency_s=latency_s, output_tokens=tokens)
    assert good({}) == 4
    assert good({"ttft": 200}) == 2  # NaN meets no TTFT objective
    assert good({"ttft": 200, "e2el": 1000}) == 1
    # TPOTs: 100 ms, 50 ms, 600 ms and NaN.
    assert good({"tpot": 100}) == 2
    assert good({"tpot": 99}) == 1


requests = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=10.0),
        st.floats(min_value=0.0, max_value=10.0),
        st.integers(min_value=0, max_value=100),
    ),
    max_size=60,
)
objective = st.floats(min_value=0.0, max_value=12_000.0)


@given(requests, objective, objective)
def test_goodput_is_bounded_and_monotone(
    rows: list[tuple[float, float, int]], low_ms: float, high_ms: float
) -> None:
    low_ms, high_ms = min(low_ms, high_ms), max(low_ms, high_ms)
    ttft_s = [min(ttft, latency) for ttft, latency, _ in rows]
    latency_s = [latency for _, latency, _ in rows]
    tokens = [count for _, _, count in rows]
    good = functools.partial(count_good, ttft_s=ttft_s, latency_s=latency_s, output_tokens=tokens)
    for name in ("ttft", "tpot", "e2el"):
        strict = good({name: low_ms})
        loose = good({name: high_ms})
        assert 0 <= strict <= loose <= len(rows)
    every = good({"ttft": high_ms, "tpot": high_ms, "e2el": high_ms})
    assert every <= good({"e2el": high_ms})

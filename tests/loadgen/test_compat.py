"""vLLM- and GuideLLM-named figures from hand-made per-request samples."""

from __future__ import annotations

import math

import numpy
import pytest

from hasten.loadgen.compat import (
    RunFigures,
    guidellm_fields,
    parse_percentiles,
    percentile_word,
    vllm_fields,
)

FIGURES = RunFigures(
    duration_s=2.0,
    num_failed=1,
    num_input_tokens=30,
    request_ttft_s=[0.1, 0.2, math.nan, 0.05],
    request_latency_s=[0.5, 1.0, 0.4, 0.05],
    request_output_tokens=[5, 9, 3, 1],
    gaps_s=[0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
)


def test_vllm_fields_follow_its_definitions() -> None:
    fields = vllm_fields(FIGURES, percentiles=(50.0, 99.9), goodput_ms={"ttft": 150})
    assert fields["completed"] == 4 and fields["failed"] == 1
    assert fields["total_output_tokens"] == 18 and fields["total_input_tokens"] == 30
    assert fields["request_throughput"] == 2.0
    assert fields["output_throughput"] == 9.0
    assert fields["total_token_throughput"] == 24.0
    assert fields["request_goodput"] == 1.0  # ttft 0.1 and 0.05 meet 150 ms
    ttfts_ms = [100.0, 200.0, 50.0]
    assert fields["mean_ttft_ms"] == pytest.approx(numpy.mean(ttfts_ms))
    assert fields["std_ttft_ms"] == pytest.approx(numpy.std(ttfts_ms))
    assert fields["median_ttft_ms"] == pytest.approx(100.0)
    assert fields["p99.9_ttft_ms"] == pytest.approx(numpy.percentile(ttfts_ms, 99.9))
    # TPOT only for requests with a TTFT and more than one token: (0.4 / 4), (0.8 / 8).
    assert fields["mean_tpot_ms"] == pytest.approx(100.0)
    assert fields["mean_itl_ms"] == pytest.approx(100.0)
    assert fields["p50_e2el_ms"] == pytest.approx(numpy.percentile([500, 1000, 400, 50], 50))


def test_vllm_fields_without_goodput_or_samples_are_null() -> None:
    empty = RunFigures(0.0, 3, 0, [], [], [], [])
    fields = vllm_fields(empty)
    assert fields["request_goodput"] is None
    assert fields["mean_ttft_ms"] is None and fields["p99_itl_ms"] is None
    assert fields["request_throughput"] == 0.0


def test_guidellm_fields_use_its_names_and_units() -> None:
    metrics = guidellm_fields(FIGURES)
    latency = metrics["request_latency"]["successful"]
    assert latency["count"] == 4
    assert latency["mean"] == pytest.approx(numpy.mean([0.5, 1.0, 0.4, 0.05]))  # seconds
    assert set(latency["percentiles"]) == {
        "p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999",
    }  # fmt: skip
    tpot = metrics["time_per_output_token_ms"]["successful"]
    assert tpot["mean"] == pytest.approx(numpy.mean([100.0, 1000 / 9, 400 / 3, 50.0]))
    itl = metrics["inter_token_latency_ms"]["successful"]
    assert itl["count"] == 2 and itl["mean"] == pytest.approx(100.0)
    assert metrics["time_to_first_token_ms"]["successful"]["count"] == 3
    assert metrics["requests_per_second"]["successful"]["mean"] == 2.0
    assert metrics["output_tokens_per_second"]["successful"]["mean"] == 9.0
    assert metrics["prompt_token_count"]["successful"]["total_sum"] == 30


def test_percentile_spelling_and_parsing() -> None:
    assert [percentile_word(p) for p in (99.0, 99.9, 50.0)] == ["99", "99.9", "50"]
    assert parse_percentiles("50,90,99.9") == (50.0, 90.0, 99.9)
    for bad in ("0", "101", "p99", ""):
        with pytest.raises(ValueError):
            parse_percentiles(bad)

"""The doctor's analysis on synthetic timings: known latencies in, the same estimates out."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.doctor.analysis import (
    CACHE_HIT_REFERENCE_MS,
    Spread,
    decode_ms_per_token,
    diagnose,
    judge_prompt_cache,
    judge_streaming,
)
from hasten.doctor.timings import ProbeTimings, StreamTiming, WholeTiming


def streamed(
    rtt_ms: float, ttft_ms: float, decode_ms: float, num_tokens: int, *, per_event: int = 1
) -> StreamTiming:
    """A stream as a network with ``rtt_ms`` delivers it.

    The first token comes alone (with the role, as servers send it); after it each event
    carries up to ``per_event`` tokens and arrives when its last token is due.
    """
    first_ms = rtt_ms + ttft_ms
    due = [first_ms + i * decode_ms for i in range(num_tokens)]
    rest = range(1, num_tokens, per_event)
    arrivals = (due[0], *(due[min(num_tokens - 1, i + per_event - 1)] for i in rest))
    return StreamTiming(
        headers_ms=first_ms,
        content_arrivals_ms=arrivals,
        end_ms=due[-1] + 0.1,
        num_completion_tokens=num_tokens,
    )


def timings(
    rtt_ms: float = 80.0,
    ttft_ms: float = 300.0,
    decode_ms: float = 20.0,
    num_tokens: int = 32,
    ttft_extra_ms: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0),
    round_trip_extra_ms: tuple[float, ...] = (0.0, 3.0, 1.0, 9.0, 0.5),
    cache_repeat_ttft_ms: float | None = None,
) -> ProbeTimings:
    streams = tuple(
        streamed(rtt_ms, ttft_ms + extra, decode_ms, num_tokens) for extra in ttft_extra_ms
    )
    whole_ms = rtt_ms + ttft_ms + decode_ms * (num_tokens - 1)
    cold = streamed(rtt_ms, ttft_ms, 0.0, 1)
    repeat_ttft = ttft_ms if cache_repeat_ttft_ms is None else cache_repeat_ttft_ms
    return ProbeTimings(
        base_url="http://127.0.0.1:1/v1",
        host="127.0.0.1",
        port=1,
        is_tls=False,
        model="m",
        max_tokens=num_tokens,
        dns_ms=None,
        connect_ms=(0.1, 0.2, 0.1),
        tls_ms=(),
        round_trip_ms=tuple(rtt_ms + extra for extra in round_trip_extra_ms),
        round_trip_method="GET /models, warm connection",
        streams=streams,
        wholes=(WholeTiming(whole_ms, whole_ms, num_tokens),),
        cache_cold=cold,
        cache_repeats=(streamed(rtt_ms, repeat_ttft, 0.0, 1),) * 2,
    )


def test_recovers_the_latencies_it_was_given() -> None:
    d = diagnose(timings())
    assert d.rtt_ms == pytest.approx(80.0)  # the fastest round trip: noise only adds
    assert d.round_trip is not None and d.round_trip.median == pytest.approx(81.0)
    assert d.client_ttft is not None and d.client_ttft.median == pytest.approx(380.0)
    assert d.server_ttft_ms == pytest.approx(300.0)
    assert d.decode_ms_per_token is not None
    assert d.decode_ms_per_token.median == pytest.approx(20.0)
    assert d.tokens_per_s == pytest.approx(50.0)
    assert d.num_tokens == 32
    assert d.streaming.is_streaming
    assert d.prompt_cache is not None and not d.prompt_cache.is_detected
    budget = dict(d.budget)
    assert budget["DNS"] is None and budget["TLS"] is None
    assert budget["decode x31"] == pytest.approx(620.0)


def test_a_round_trip_far_above_tcp_connect_is_noted() -> None:
    assert any("past the TCP endpoint" in note for note in diagnose(timings()).notes)
    near = timings(rtt_ms=0.2, ttft_ms=300.0, round_trip_extra_ms=(0.0,))
    assert not any("past the TCP endpoint" in note for note in diagnose(near).notes)


def test_levers_rest_on_the_measurements() -> None:
    d = diagnose(timings())
    levers = {lever.name: lever for lever in d.levers}
    assert levers["streaming"].saved_ms == pytest.approx(620.0)  # whole answer - first token
    assert levers["caching"].saved_ms == pytest.approx(1000.0 - CACHE_HIT_REFERENCE_MS)
    assert levers["nearer deployment"].saved_ms == pytest.approx(80.0)
    assert levers["max_tokens cap"].saved_ms == pytest.approx(2000.0)  # per 100 tokens
    assert levers["warm connections"].saved_ms == pytest.approx(0.1)
    assert levers["hedging"].saved_ms == pytest.approx(0.0)
    assert "steady" in levers["hedging"].basis
    assert levers["local model"].saved_ms is None
    assert "not measured" in levers["local model"].basis


def test_a_slow_try_shows_as_a_hedging_tail() -> None:
    d = diagnose(timings(ttft_extra_ms=(0.0, 5.0, 2.0, 400.0, 1.0)))
    hedging = next(lever for lever in d.levers if lever.name == "hedging")
    assert hedging.saved_ms == pytest.approx(398.0)
    assert "rough: 5 tries" in hedging.basis and "steady" not in hedging.basis


def test_a_faster_repeat_is_prompt_caching() -> None:
    d = diagnose(timings(cache_repeat_ttft_ms=60.0))
    assert d.prompt_cache is not None and d.prompt_cache.is_detected
    assert d.prompt_cache.saved_ms == pytest.approx(240.0)


def test_a_repeat_within_the_noise_is_not_caching() -> None:
    ttft = Spread.of([380.0, 420.0, 340.0, 400.0, 360.0])
    cold = streamed(80.0, 300.0, 0.0, 1)
    repeat = streamed(80.0, 260.0, 0.0, 1)  # 40 ms faster, but tries vary by more than that
    verdict = judge_prompt_cache(cold, [repeat], ttft)
    assert verdict is not None and not verdict.is_detected


def test_several_tokens_per_event_do_not_shrink_decode() -> None:
    stream = streamed(0.0, 100.0, 10.0, 33, per_event=4)
    assert len(stream.content_arrivals_ms) < 33
    value = decode_ms_per_token(stream)
    assert value is not None and value == pytest.approx(10.0)


def test_text_in_one_blob_is_buffered_not_streamed() -> None:
    blob = StreamTiming(headers_ms=900.0, content_arrivals_ms=(1000.0,) * 32, end_ms=1000.5)
    verdict = judge_streaming([blob, blob, blob])
    assert not verdict.is_streaming and "buffered" in verdict.detail
    not_sse = StreamTiming(100.0, (900.0,), 900.0, is_event_stream=False)
    assert "text/event-stream" in judge_streaming([not_sse]).detail


def test_a_round_trip_longer_than_the_ttft_is_flagged_not_negative() -> None:
    d = diagnose(timings(rtt_ms=80.0, round_trip_extra_ms=(500.0, 600.0)))
    assert d.server_ttft_ms == 0.0
    assert any("over-estimated" in note for note in d.notes)


def test_a_single_try_has_no_spread_for_hedging() -> None:
    d = diagnose(timings(ttft_extra_ms=(0.0,), round_trip_extra_ms=(0.0,)))
    hedging = next(lever for lever in d.levers if lever.name == "hedging")
    assert hedging.saved_ms is None
    assert d.client_ttft is not None and d.client_ttft.stdev == 0.0


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=20))
def test_spread_is_ordered(values: list[float]) -> None:
    spread = Spread.of(values)
    assert spread is not None and spread.num == len(values)
    assert spread.min <= spread.median <= spread.max
    assert spread.stdev >= 0 and math.isfinite(spread.stdev)


@given(
    rtt_ms=st.floats(min_value=0.0, max_value=2000.0),
    ttft_ms=st.floats(min_value=0.0, max_value=20_000.0),
    decode_ms=st.floats(min_value=0.01, max_value=500.0),
    num_tokens=st.integers(min_value=2, max_value=512),
    per_event=st.integers(min_value=1, max_value=8),
)
def test_any_latency_model_is_recovered(
    rtt_ms: float, ttft_ms: float, decode_ms: float, num_tokens: int, per_event: int
) -> None:
    stream = streamed(rtt_ms, ttft_ms, decode_ms, num_tokens, per_event=per_event)
    probe = timings(rtt_ms, ttft_ms, decode_ms, num_tokens, round_trip_extra_ms=(0.0, 1.0))
    probe = dataclasses.replace(probe, streams=(stream,) * 3)
    d = diagnose(probe)
    assert d.rtt_ms == pytest.approx(rtt_ms)
    assert d.server_ttft_ms == pytest.approx(ttft_ms, abs=1e-6)
    assert d.decode_ms_per_token is not None
    assert d.decode_ms_per_token.median == pytest.approx(decode_ms, rel=1e-6)
    # The budget adds up: connect (0.1 ms median) + RTT + server TTFT + decode x (n - 1).
    known = sum(ms for _, ms in d.budget if ms is not None)
    expected = 0.1 + rtt_ms + ttft_ms + decode_ms * (num_tokens - 1)
    assert known == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert all(lever.saved_ms is None or lever.saved_ms >= -1e-6 for lever in d.levers)

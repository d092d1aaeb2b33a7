"""Unit tests for hasten.simulator.state: where a request's latency is drawn from."""

from __future__ import annotations

import random

from hasten.simulator.config import SimConfig
from hasten.simulator.latency import plan_latency
from hasten.simulator.state import MAX_TRACED_CALLERS, SimState

TRACED = SimConfig(ttft_base_ms=10, jitter_sigma=0.5, straggler_prob=0.5, draw_by="trace")
CALLER_A = (b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
CALLER_B = (CALLER_A[0], b"1111111111111111")  # the same request, another system sends it


def first_token_ms(rng: random.Random, config: SimConfig = TRACED) -> float:
    return plan_latency(config, rng, 0, 0).first_token_ms


def test_by_arrival_every_request_draws_from_the_shared_stream() -> None:
    state = SimState(SimConfig(ttft_base_ms=10, jitter_sigma=0.5))
    assert state.latency_rng(CALLER_A) is state.rng
    assert state.latency_rng(None) is state.rng


def test_by_trace_two_callers_of_one_trace_draw_the_same() -> None:
    state = SimState(TRACED)
    draws_a = first_token_ms(state.latency_rng(CALLER_A))
    draws_b = first_token_ms(state.latency_rng(CALLER_B))
    assert draws_a == draws_b


def test_by_trace_a_callers_second_sending_draws_afresh() -> None:
    state = SimState(TRACED)
    sendings = [first_token_ms(state.latency_rng(CALLER_A)) for _ in range(4)]
    assert len(set(sendings)) == 4
    # Another system sending the same trace meets the same sequence, sending by sending.
    assert [first_token_ms(state.latency_rng(CALLER_B)) for _ in range(4)] == sendings


def test_by_trace_the_draws_follow_the_seed_and_a_reset_replays_them() -> None:
    state = SimState(TRACED)
    first = first_token_ms(state.latency_rng(CALLER_A))
    state.reset(clear_prefix_cache=False)
    assert first_token_ms(state.latency_rng(CALLER_A)) == first
    other_seed = SimState(SimConfig(**{**TRACED.to_dict(), "models": TRACED.models, "seed": 7}))
    assert first_token_ms(other_seed.latency_rng(CALLER_A)) != first


def test_without_a_trace_a_traced_simulator_draws_by_arrival() -> None:
    state = SimState(TRACED)
    assert state.latency_rng(None) is state.rng


def test_the_callers_remembered_are_bounded() -> None:
    state = SimState(TRACED)
    first = first_token_ms(state.latency_rng(CALLER_A))
    for index in range(MAX_TRACED_CALLERS):
        state.latency_rng((b"%032x" % (index + 1), CALLER_A[1]))
    assert len(state._num_sent) == MAX_TRACED_CALLERS
    # CALLER_A was forgotten, so its next sending counts as its first again.
    assert first_token_ms(state.latency_rng(CALLER_A)) == first

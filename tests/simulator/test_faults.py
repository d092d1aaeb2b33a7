"""Unit tests for hasten.simulator.faults: injected faults drawn by rate or forced by header."""

from __future__ import annotations

import random

from hasten.simulator.config import SimConfig, config_from_mapping
from hasten.simulator.faults import (
    Fault,
    FaultKind,
    burst_fault,
    decide_fault,
    default_disconnect_after_chunks,
    draw_fault_kind,
)


def test_fault_kind_follows_rates() -> None:
    rng = random.Random(0)
    assert draw_fault_kind(SimConfig(error_rate=1), rng) is FaultKind.SERVER_ERROR
    assert draw_fault_kind(SimConfig(rate_limit_rate=1), rng) is FaultKind.RATE_LIMIT
    assert draw_fault_kind(SimConfig(disconnect_rate=1), rng) is FaultKind.DISCONNECT
    kinds = [
        draw_fault_kind(SimConfig(error_rate=0.25, rate_limit_rate=0.25), rng) for _ in range(400)
    ]
    assert {FaultKind.NONE, FaultKind.SERVER_ERROR, FaultKind.RATE_LIMIT} == set(kinds)


def test_zero_rates_do_not_consume_randomness() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert decide_fault(SimConfig(), rng, num_tokens=16).kind is FaultKind.NONE
    assert rng.getstate() == state


def test_forced_faults_win_over_rates() -> None:
    config = SimConfig(error_rate=1, retry_after_s=2)
    rng = random.Random(0)
    assert decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.NONE).kind is (
        FaultKind.NONE
    )
    limited = decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.RATE_LIMIT)
    assert limited.retry_after_s == 2
    limited = decide_fault(
        config, rng, num_tokens=8, forced_kind=FaultKind.RATE_LIMIT, forced_retry_after_s=0.5
    )
    assert limited.retry_after_s == 0.5
    cut = decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.DISCONNECT)
    assert cut.after_chunks == default_disconnect_after_chunks(8) == 5
    cut = decide_fault(
        config, rng, num_tokens=8, forced_kind=FaultKind.DISCONNECT, forced_after_chunks=0
    )
    assert cut.after_chunks == 0
    assert decide_fault(config, rng, num_tokens=8).after_chunks is None


def test_every_fault_rate_draws_its_kind() -> None:
    rng = random.Random(0)
    rates = {
        "silent_rate": FaultKind.SILENT,
        "hang_rate": FaultKind.HANG,
        "malformed_rate": FaultKind.MALFORMED,
        "truncate_rate": FaultKind.TRUNCATE,
    }
    for name, kind in rates.items():
        assert draw_fault_kind(config_from_mapping({name: 1.0}), rng) is kind


def test_mid_stream_faults_strike_after_half_the_tokens_unless_told() -> None:
    rng = random.Random(0)
    for kind in (FaultKind.MALFORMED, FaultKind.TRUNCATE):
        assert decide_fault(SimConfig(), rng, num_tokens=10, forced_kind=kind).after_chunks == (
            default_disconnect_after_chunks(10)
        )
        forced = decide_fault(
            SimConfig(), rng, num_tokens=10, forced_kind=kind, forced_after_chunks=3
        )
        assert forced.after_chunks == 3
    assert decide_fault(SimConfig(), rng, num_tokens=10, forced_kind=FaultKind.SILENT) == (
        Fault(FaultKind.SILENT)
    )


def test_a_burst_fault_is_an_up_front_error_with_its_status() -> None:
    assert burst_fault(503) == Fault(FaultKind.SERVER_ERROR, status=503)

"""Unit tests for hasten.routing.breaker: trips, half-open probes, error rate, Retry-After."""

from __future__ import annotations

from dataclasses import replace

from hasten.routing.breaker import MAX_RETRY_AFTER_PAUSE_S, BreakerState, CircuitBreaker
from tests.support.routing import BREAKER


def test_breaker_trips_on_consecutive_failures_then_recovers_through_half_open() -> None:
    breaker = CircuitBreaker(BREAKER)
    for _ in range(3):
        assert breaker.is_available(0.0)
        breaker.record_failure(0.0, is_probe=breaker.on_attempt(0.0), reason="500")
    assert breaker.state(0.5) is BreakerState.OPEN and not breaker.is_available(0.5)
    assert breaker.state(1.0) is BreakerState.HALF_OPEN
    assert breaker.on_attempt(1.0) is True  # the one probe
    assert not breaker.is_available(1.0)  # no second probe while the first runs
    breaker.record_success(1.1, is_probe=True)
    assert breaker.state(1.1) is BreakerState.CLOSED


def test_failed_probe_reopens_with_a_longer_cooldown() -> None:
    breaker = CircuitBreaker(BREAKER)
    for _ in range(3):
        breaker.record_failure(0.0, is_probe=False, reason="500")
    assert breaker.on_attempt(1.0)
    breaker.record_failure(1.0, is_probe=True, reason="500")
    assert breaker.state(2.5) is BreakerState.OPEN  # 2 s now, not 1 s
    assert breaker.state(3.0) is BreakerState.HALF_OPEN


def test_breaker_trips_on_error_rate() -> None:
    breaker = CircuitBreaker(replace(BREAKER, max_consecutive_failures=100, error_rate=0.5))
    for i in range(10):
        if i % 2:
            breaker.record_failure(0.0, is_probe=False, reason="500")
        else:
            breaker.record_success(0.0, is_probe=False)
    assert breaker.state(0.0) is BreakerState.OPEN
    assert "error rate" in breaker.last_trip_reason


def test_retry_after_opens_at_once_for_that_long() -> None:
    breaker = CircuitBreaker(BREAKER)
    breaker.record_failure(0.0, is_probe=False, reason="429", retry_after_s=30.0)
    assert breaker.state(29.0) is BreakerState.OPEN
    assert breaker.state(30.0) is BreakerState.HALF_OPEN


def test_a_retry_after_pause_is_bounded() -> None:
    breaker = CircuitBreaker(BREAKER)
    breaker.record_failure(0.0, is_probe=False, reason="429", retry_after_s=1e12)
    assert breaker.state(MAX_RETRY_AFTER_PAUSE_S - 1.0) is BreakerState.OPEN
    assert breaker.state(MAX_RETRY_AFTER_PAUSE_S) is BreakerState.HALF_OPEN
    breaker.record_failure(1.0, is_probe=False, reason="429", retry_after_s=1e12)  # while open
    assert breaker.state(1.0 + MAX_RETRY_AFTER_PAUSE_S) is BreakerState.HALF_OPEN

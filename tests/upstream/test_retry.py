"""Unit tests for hasten.upstream.retry: Retry-After parsing, jittered backoff, retry decisions."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.config import RetryConfig
from hasten.upstream.retry import (
    RETRYABLE_STATUSES,
    backoff_s,
    is_retryable_status,
    parse_retry_after_s,
    retry_delay_s,
)

NOW_S = 1_700_000_000.0  # a fixed "now" so date arithmetic is exact


# --- parse_retry_after_s --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0.0), ("3", 3.0), (" 7 ", 7.0), ("1.5", 1.5), ("120", 120.0), ("-4", 0.0)],
)
def test_retry_after_seconds(value: str, expected: float) -> None:
    assert parse_retry_after_s({"retry-after": value}, now_s=NOW_S) == expected


def test_retry_after_http_date_in_future() -> None:
    when = datetime.fromtimestamp(NOW_S + 42, tz=UTC)
    header = format_datetime(when, usegmt=True)
    assert header.endswith("GMT")
    assert parse_retry_after_s({"retry-after": header}, now_s=NOW_S) == pytest.approx(42.0)


def test_retry_after_http_date_in_past_is_zero() -> None:
    header = format_datetime(datetime.fromtimestamp(NOW_S - 600, tz=UTC), usegmt=True)
    assert parse_retry_after_s({"retry-after": header}, now_s=NOW_S) == 0.0


def test_retry_after_rfc_example_date() -> None:
    # RFC 9110 example; 1445412480 is 2015-10-21T07:28:00Z.
    headers = {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}
    assert parse_retry_after_s(headers, now_s=1445412480.0 - 10) == pytest.approx(10.0)


@pytest.mark.parametrize(("value", "expected"), [("1500", 1.5), ("0", 0.0), ("250.5", 0.2505)])
def test_retry_after_ms(value: str, expected: float) -> None:
    assert parse_retry_after_s({"retry-after-ms": value}) == pytest.approx(expected)


def test_retry_after_ms_wins_over_retry_after() -> None:
    headers = {"retry-after-ms": "200", "retry-after": "30"}
    assert parse_retry_after_s(headers) == pytest.approx(0.2)


def test_garbage_retry_after_ms_falls_back_to_retry_after() -> None:
    headers = {"retry-after-ms": "soon", "retry-after": "4"}
    assert parse_retry_after_s(headers) == 4.0
    assert parse_retry_after_s({"retry-after-ms": "soon"}) is None


def test_negative_retry_after_ms_clamped() -> None:
    assert parse_retry_after_s({"retry-after-ms": "-100"}) == 0.0


@pytest.mark.parametrize("value", ["", "   ", "soon", "tomorrow", "5s", "Wed, 99 Foo 2015", "1,5"])
def test_garbage_retry_after_is_none(value: str) -> None:
    assert parse_retry_after_s({"retry-after": value}, now_s=NOW_S) is None


def test_no_header_is_none() -> None:
    assert parse_retry_after_s({}) is None
    assert parse_retry_after_s({"content-type": "application/json"}) is None


@settings(deadline=None)
@given(st.text(max_size=40))
def test_parse_never_raises_and_never_negative(value: str) -> None:
    for headers in ({"retry-after": value}, {"retry-after-ms": value}):
        result = parse_retry_after_s(headers, now_s=NOW_S)
        assert result is None or result >= 0.0


# --- statuses -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert is_retryable_status(status)


@pytest.mark.parametrize("status", [200, 201, 301, 400, 401, 403, 404, 413, 422])
def test_non_retryable_statuses(status: int) -> None:
    assert not is_retryable_status(status)
    assert status not in RETRYABLE_STATUSES


# --- backoff_s ------------------------------------------------------------------------------

_configs = st.builds(
    RetryConfig,
    max_retries=st.integers(0, 10),
    backoff_base_s=st.floats(0.001, 10.0),
    backoff_max_s=st.floats(0.001, 100.0),
    max_retry_after_s=st.floats(0.001, 100.0),
)


@settings(deadline=None)
@given(attempt=st.integers(0, 60), config=_configs, seed=st.integers(0, 2**32))
def test_backoff_within_full_jitter_bounds(attempt: int, config: RetryConfig, seed: int) -> None:
    ceiling = min(config.backoff_max_s, config.backoff_base_s * 2.0**attempt)
    delay = backoff_s(attempt, config, random.Random(seed))
    assert 0.0 <= delay <= ceiling


@settings(deadline=None)
@given(seed=st.integers(0, 2**32))
def test_backoff_is_deterministic_for_a_seed(seed: int) -> None:
    config = RetryConfig()
    a = [backoff_s(n, config, random.Random(seed)) for n in range(5)]
    b = [backoff_s(n, config, random.Random(seed)) for n in range(5)]
    assert a == b


def test_backoff_ceiling_grows_then_caps() -> None:
    config = RetryConfig(backoff_base_s=0.5, backoff_max_s=3.0)

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    top = Top()
    assert [backoff_s(n, config, top) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_is_jittered() -> None:
    config = RetryConfig(backoff_base_s=1.0, backoff_max_s=1.0)
    rng = random.Random(1)
    assert len({backoff_s(0, config, rng) for _ in range(20)}) > 1


# --- retry_delay_s --------------------------------------------------------------------------


def test_none_when_out_of_retries() -> None:
    config = RetryConfig(max_retries=2)
    rng = random.Random(0)
    assert retry_delay_s(0, config, rng, retry_after_s=None, remaining_s=100.0) is not None
    assert retry_delay_s(1, config, rng, retry_after_s=None, remaining_s=100.0) is not None
    assert retry_delay_s(2, config, rng, retry_after_s=None, remaining_s=100.0) is None
    assert retry_delay_s(3, config, rng, retry_after_s=None, remaining_s=100.0) is None


def test_none_with_zero_retries() -> None:
    config = RetryConfig(max_retries=0)
    assert retry_delay_s(0, config, random.Random(0), retry_after_s=0.0, remaining_s=100.0) is None


def test_none_when_retry_after_exceeds_max() -> None:
    config = RetryConfig(max_retry_after_s=30.0)
    rng = random.Random(0)
    assert retry_delay_s(0, config, rng, retry_after_s=31.0, remaining_s=1000.0) is None
    assert retry_delay_s(0, config, rng, retry_after_s=30.0, remaining_s=1000.0) == 30.0


def test_none_when_retry_after_exceeds_remaining_time() -> None:
    config = RetryConfig()
    rng = random.Random(0)
    assert retry_delay_s(0, config, rng, retry_after_s=5.0, remaining_s=4.0) is None
    assert retry_delay_s(0, config, rng, retry_after_s=5.0, remaining_s=5.0) is None
    assert retry_delay_s(0, config, rng, retry_after_s=5.0, remaining_s=5.5) == 5.0


def test_none_when_no_time_left() -> None:
    config = RetryConfig()
    assert retry_delay_s(0, config, random.Random(0), retry_after_s=None, remaining_s=0.0) is None


def test_none_when_backoff_exceeds_remaining_time() -> None:
    config = RetryConfig(backoff_base_s=10.0, backoff_max_s=10.0)

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    assert retry_delay_s(0, config, Top(), retry_after_s=None, remaining_s=9.0) is None
    assert retry_delay_s(0, config, Top(), retry_after_s=None, remaining_s=11.0) == 10.0


def test_retry_after_is_a_lower_bound() -> None:
    config = RetryConfig(backoff_base_s=0.1, backoff_max_s=0.1)
    delay = retry_delay_s(0, config, random.Random(0), retry_after_s=2.0, remaining_s=60.0)
    assert delay == 2.0


def test_backoff_used_when_longer_than_retry_after() -> None:
    config = RetryConfig(backoff_base_s=5.0, backoff_max_s=5.0)

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    assert retry_delay_s(0, config, Top(), retry_after_s=1.0, remaining_s=60.0) == 5.0


@settings(deadline=None)
@given(
    attempt=st.integers(0, 12),
    config=_configs,
    seed=st.integers(0, 2**32),
    retry_after=st.none() | st.floats(0.0, 200.0),
    remaining=st.floats(0.0, 500.0),
)
def test_retry_delay_properties(
    attempt: int,
    config: RetryConfig,
    seed: int,
    retry_after: float | None,
    remaining: float,
) -> None:
    delay = retry_delay_s(
        attempt, config, random.Random(seed), retry_after_s=retry_after, remaining_s=remaining
    )
    if attempt >= config.max_retries:
        assert delay is None
    if retry_after is not None and retry_after > config.max_retry_after_s:
        assert delay is None
    if retry_after is not None and retry_after >= remaining:
        assert delay is None
    if delay is not None:
        assert 0.0 <= delay < remaining
        ceiling = min(config.backoff_max_s, config.backoff_base_s * 2.0**attempt)
        if retry_after is None:
            assert delay <= ceiling
        else:
            assert retry_after <= delay <= max(ceiling, retry_after)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "inf"},
        {"retry-after": "NaN"},
        {"retry-after-ms": "1e400"},
        {"retry-after-ms": "-inf"},
    ],
)
def test_a_retry_after_that_is_no_time_is_absent(headers: dict[str, str]) -> None:
    assert parse_retry_after_s(headers) is None

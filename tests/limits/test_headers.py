from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.config.limits import KeyLimits
from hasten.errors import BudgetExceeded, RateLimited
from hasten.limits.headers import denial, duration_text, rate_headers
from hasten.limits.ledger import BUDGET, REQUESTS, TOO_LARGE, Verdict


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (-5, "0s"),
        (0.2, "1ms"),
        (600, "600ms"),
        (1000, "1s"),
        (1500, "1.5s"),
        (59_400, "59.4s"),
        (360_000, "6m0s"),
        (61_001, "1m1.001s"),
        (3_600_000, "1h0m0s"),
    ],
)
def test_durations_are_written_as_openai_writes_them(ms: float, text: str) -> None:
    assert duration_text(ms) == text


_GO = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?$")


@given(st.integers(min_value=1, max_value=10**9))
def test_a_duration_reads_back_as_itself(ms: int) -> None:
    match = _GO.match(duration_text(ms))
    assert match is not None
    hours, minutes, seconds, millis = match.groups()
    total = (
        int(hours or 0) * 3_600_000
        + int(minutes or 0) * 60_000
        + round(float(seconds or 0) * 1000)
        + int(millis or 0)
    )
    assert total == ms


def _verdict(denied_by: str | None, retry_ms: float = 0.0) -> Verdict:
    return Verdict(denied_by is None, denied_by, retry_ms, 7, 1500.0, 900, 360_000.0)


def test_rate_headers_name_only_the_limits_the_key_has() -> None:
    both = rate_headers(KeyLimits(requests_per_minute=10, tokens_per_minute=1000), _verdict(None))
    assert both == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "7",
        "x-ratelimit-reset-requests": "1.5s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    assert rate_headers(KeyLimits(max_concurrent=2), _verdict(None)) == {}


def test_denials_carry_retry_after_and_their_code() -> None:
    limits = KeyLimits(requests_per_minute=10, budget_usd=5.0)
    rpm = denial(limits, _verdict(REQUESTS, 2500.0), 10)
    assert type(rpm) is RateLimited and rpm.code == "rate_limit_exceeded"
    assert rpm.retry_after_s == 2.5 and rpm.headers["retry-after-ms"] == "2500"
    assert rpm.headers["x-ratelimit-remaining-requests"] == "7"
    budget = denial(limits, _verdict(BUDGET, 86_400_000.0), 10)
    assert isinstance(budget, BudgetExceeded) and budget.code == "insufficient_quota"
    assert budget.error_type == "insufficient_quota"
    assert b'"type":"insufficient_quota"' in budget.to_json()
    too_large = denial(KeyLimits(tokens_per_minute=5), _verdict(TOO_LARGE), 10)
    assert too_large.retry_after_s is None and "retry-after-ms" not in too_large.headers

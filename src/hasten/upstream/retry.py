"""Pure retry policy: which failures to retry, and how long to wait before the next try."""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

from hasten.config import RetryConfig

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def parse_retry_after_s(headers: Mapping[str, str], *, now_s: float | None = None) -> float | None:
    """Seconds the upstream asked to wait: ``retry-after-ms``, or ``Retry-After`` (s or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            seconds = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            return max(0.0, seconds) if math.isfinite(seconds) else None
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # "inf" or "nan" is no time to wait: treated as absent, not as forever.
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - current)


def backoff_s(attempt: int, config: RetryConfig, rng: random.Random) -> float:
    """Exponential backoff with full jitter (AWS architecture blog): U(0, min(cap, base*2^n))."""
    ceiling = min(config.backoff_max_s, config.backoff_base_s * (2.0**attempt))
    return rng.uniform(0.0, ceiling)


def retry_delay_s(
    attempt: int,
    config: RetryConfig,
    rng: random.Random,
    *,
    retry_after_s: float | None,
    remaining_s: float,
) -> float | None:
    """Delay before retry number ``attempt + 1``, or None when retrying here is pointless.

    None means: out of retries, or the upstream asks for a longer wait than we accept or
    than the request has left; the caller moves on to the next fallback instead.
    """
    if attempt >= config.max_retries:
        return None
    delay_s = backoff_s(attempt, config, rng)
    if retry_after_s is not None:
        if retry_after_s > config.max_retry_after_s:
            return None
        delay_s = max(delay_s, retry_after_s)
    if delay_s >= remaining_s:
        return None
    return delay_s

"""What a limited key's client is told: the x-ratelimit-* headers OpenAI clients read,
on every response, and the 429 a denied request gets.

The reset headers use OpenAI's duration format (Go's: ``600ms``, ``1s``, ``6m0s``,
``1h0m0s``); ``retry-after`` is whole seconds (``hasten.wire.asgi.error_headers``) and
``retry-after-ms`` the exact wait, which the openai SDK prefers.
"""

from __future__ import annotations

import math

from hasten.config.limits import KeyLimits
from hasten.errors import BudgetExceeded, RateLimited
from hasten.limits.ledger import (
    BUDGET,
    CONCURRENCY,
    REQUESTS,
    RESERVED,
    TOKENS,
    TOO_LARGE,
    Verdict,
)

_MS_PER_S = 1000
_S_PER_MIN = 60
_S_PER_H = 3600


def duration_text(duration_ms: float) -> str:
    """``duration_ms`` rounded up to a whole millisecond, as OpenAI writes it."""
    ms = math.ceil(duration_ms) if duration_ms > 0 else 0
    if ms == 0:
        return "0s"
    if ms < _MS_PER_S:
        return f"{ms}ms"
    hours, rest_ms = divmod(ms, _S_PER_H * _MS_PER_S)
    minutes, rest_ms = divmod(rest_ms, _S_PER_MIN * _MS_PER_S)
    whole_s, frac_ms = divmod(rest_ms, _MS_PER_S)
    seconds = f"{whole_s}.{frac_ms:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{minutes}m{seconds}"
    return seconds


def rate_headers(limits: KeyLimits, verdict: Verdict) -> dict[str, str]:
    """The x-ratelimit-* headers of the limits this key has (requests, tokens, or both)."""
    headers = {}
    if limits.requests_per_minute is not None:
        headers["x-ratelimit-limit-requests"] = str(limits.requests_per_minute)
        headers["x-ratelimit-remaining-requests"] = str(verdict.requests_remaining)
        headers["x-ratelimit-reset-requests"] = duration_text(verdict.requests_reset_ms)
    if limits.tokens_per_minute is not None:
        headers["x-ratelimit-limit-tokens"] = str(limits.tokens_per_minute)
        headers["x-ratelimit-remaining-tokens"] = str(verdict.tokens_remaining)
        headers["x-ratelimit-reset-tokens"] = duration_text(verdict.tokens_reset_ms)
    return headers


def rate_header_pairs(limits: KeyLimits, verdict: Verdict) -> tuple[tuple[bytes, bytes], ...]:
    """``rate_headers`` as the response's raw header pairs: rendered once, when a ticket is
    granted, so a request admitted from it adds them without formatting anything."""
    headers = rate_headers(limits, verdict)
    return tuple((name.encode(), value.encode()) for name, value in headers.items())


def denial(limits: KeyLimits, verdict: Verdict, num_tokens: int) -> RateLimited:
    """The 429 for a denied request, carrying its Retry-After and rate headers."""
    retry_s: float | None = verdict.retry_after_ms / _MS_PER_S
    wait = duration_text(verdict.retry_after_ms)
    error: RateLimited
    if verdict.denied_by == BUDGET:
        error = BudgetExceeded(
            f"this key's budget of ${limits.budget_usd:g} per {limits.budget_period_s:g} s "
            f"is spent; it renews in {wait}",
            retry_after_s=retry_s,
        )
    elif verdict.denied_by == RESERVED:
        error = BudgetExceeded(
            f"this key's budget of ${limits.budget_usd:g} per {limits.budget_period_s:g} s "
            f"is spent or reserved by its requests in progress; try again in {wait}",
            retry_after_s=retry_s,
        )
    elif verdict.denied_by == TOO_LARGE:
        error = RateLimited(
            f"Request too large: about {num_tokens} tokens (the prompt and the most output "
            f"tokens asked for), over the key's {limits.tokens_per_minute} tokens per minute"
        )
        retry_s = None
    else:
        error = RateLimited(
            _message(limits, verdict.denied_by, num_tokens, wait), retry_after_s=retry_s
        )
    error.headers.update(rate_headers(limits, verdict))
    if retry_s is not None:
        error.headers["retry-after-ms"] = str(math.ceil(verdict.retry_after_ms))
    return error


def _message(limits: KeyLimits, denied_by: str | None, num_tokens: int, wait: str) -> str:
    if denied_by == REQUESTS:
        return (
            f"Rate limit reached for requests per minute (RPM): limit "
            f"{limits.requests_per_minute}; try again in {wait}"
        )
    if denied_by == TOKENS:
        return (
            f"Rate limit reached for tokens per minute (TPM): limit {limits.tokens_per_minute},"
            f" requested about {num_tokens}; try again in {wait}"
        )
    assert denied_by == CONCURRENCY
    return (
        f"Too many concurrent requests for this key (limit {limits.max_concurrent}); "
        f"try again in {wait}"
    )

"""What an upstream attempt's span says (OpenTelemetry HTTP conventions, ``hasten.*`` for the
gateway's own facts). Every function returns at once when the stage is not recording."""

from __future__ import annotations

from hasten.errors import HastenError
from hasten.values.stage import Stage


def start_attempt(
    trace: Stage,
    deployment: str,
    base_url: str,
    path: str,
    *,
    index: int,
    is_hedge: bool,
    is_retry: bool,
    after: str,
) -> Stage:
    """The CLIENT span of one upstream attempt; hedges and failovers are its siblings."""
    span = trace.child("upstream", is_client=True)  # named below: no f-string when off
    if span.is_recording:
        span.rename(f"upstream {deployment}")
        span.set("hasten.deployment", deployment)
        span.set("url.full", base_url + path)
        span.set("http.request.method", "POST")
        span.set("hasten.attempt.index", index)
        span.set("hasten.attempt.is_hedge", is_hedge)
        span.set("hasten.attempt.is_retry", is_retry)
        if after:
            span.set("hasten.attempt.failover_reason", after)  # what ended the one before
    return span


def end_attempt(
    span: Stage,
    outcome: str,
    *,
    status: int | None = None,
    ttfb_ms: float | None = None,
    reason: str = "",
    error: HastenError | None = None,
    is_ended: bool = True,
) -> None:
    """``outcome``: won, lost (another attempt won the race), cancelled or failed."""
    if span.is_recording:
        span.set("hasten.attempt.outcome", outcome)
        if status is not None:
            span.set("http.response.status_code", status)
        if ttfb_ms is not None:
            span.set("hasten.attempt.ttfb_ms", ttfb_ms)
        if outcome == "failed":
            span.fail(error or reason, error_type=reason)
        elif status is not None and status >= 400:
            span.fail(f"HTTP {status}", error_type=str(status))
    if is_ended:
        span.end()

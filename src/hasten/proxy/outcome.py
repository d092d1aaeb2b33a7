"""From the pipeline's ``Exchange`` to one ``RequestOutcome``, handed to every observer;
and the ``x-hasten-saved-ms`` header of what an answer saved (``Savings``, a port)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from hasten.upstream.dispatch import PRIMARY_HEADER
from hasten.values.outcome import CLIENT_GONE_STATUS, COALESCED, RequestOutcome
from hasten.values.usage import usage_tokens

if TYPE_CHECKING:
    from hasten.cache import CachedAnswer
    from hasten.proxy.exchange import Exchange
    from hasten.proxy.pipeline import Pipeline

_log = logging.getLogger("hasten.proxy")


def build_outcome(ex: Exchange, status: int, error_code: str | None) -> RequestOutcome:
    """The outcome of a finished exchange; ``status``/``error_code`` of a raised error."""
    track = ex.track
    assert track is not None
    now_s = time.perf_counter()
    started_s = ex.started_s
    if track.status:
        status = track.status  # what the client got, even if an error came after
    elif not status:
        status, error_code = CLIENT_GONE_STATUS, error_code or "client_gone"
    if track.error_code is not None and error_code is None:
        error_code = track.error_code
    ttfb_s = None if ex.upstream_ttfb_ms is None else ex.upstream_ttfb_ms / 1000.0
    head_s = (track.start_s if track.start_s is not None else now_s) - started_s
    gaps_s = track.gaps_s
    tail = ex.usage_tail if ex.usage_tail is not None else track.prev + track.tail
    tokens_in, tokens_out = usage_tokens(tail)
    headers = ex.call_headers or {}
    failovers = headers.get("x-hasten-failover")
    is_call = ex.is_upstream_call
    # Positional, in field order: with 27 fields, keyword matching costs several times the
    # construction itself (tests/test_gateway_metrics.py checks the fields by name).
    return RequestOutcome(
        ex.request_id,
        ex.endpoint.name,
        ex.tenant,
        ex.model.route.name,  # model
        ex.deployment or None,
        ex.cache_label,
        status,
        error_code,
        ex.is_stream,
        started_s,
        None if track.first_s is None else track.first_s - started_s,  # ttft_s
        (track.end_s if track.end_s is not None else now_s) - started_s,  # e2e_s
        ttfb_s,
        max(0.0, head_s - (ttfb_s or 0.0)),  # gateway_s
        len(gaps_s),
        sum(gaps_s),
        max(gaps_s, default=0.0),
        gaps_s,
        tokens_in,
        tokens_out,
        ex.saved_s,
        is_call,
        headers.get("x-hasten-hedge", "") if is_call else "",
        tuple(failovers.split(", ")) if failovers and is_call else (),
        ex.semantic_s,
        time.time(),  # ended_at
        ex.resume if is_call else "",
    )


def answer_saved(
    pipe: Pipeline, ex: Exchange, entry: CachedAnswer, replay_s: float
) -> tuple[bytes, bytes] | None:
    """A cache answer's saving (``hasten.metrics.saved``) as its ``x-hasten-saved-ms``
    header, kept on ``ex`` for the counter; None without an estimate. ``replay_s``: the
    pacing still to come, part of what the client waits."""
    ex.usage_tail = entry.usage_tail  # the tokens, even when the client's copy has no usage
    num_tokens = entry.usage[1] or 0
    waited_s = time.perf_counter() - ex.started_s + replay_s
    saved_s = pipe.savings.answer_s(ex.model.route.name, num_tokens, waited_s, time.monotonic())
    return _saved_header(ex, saved_s)


def hedge_saved(pipe: Pipeline, ex: Exchange) -> tuple[bytes, bytes] | None:
    """A winning hedge's saving as its header (see ``answer_saved``); None otherwise."""
    headers = ex.call_headers
    if not headers or headers.get("x-hasten-hedge") != "won":
        return None
    primary = headers.get(PRIMARY_HEADER, "")
    elapsed_ms = ex.upstream_ttfb_ms or 0.0
    return _saved_header(ex, pipe.savings.hedge_s(ex.model.route.name, primary, elapsed_ms))


def _saved_header(ex: Exchange, saved_s: float | None) -> tuple[bytes, bytes] | None:
    if saved_s is None:
        return None
    ex.saved_s = saved_s
    return (b"x-hasten-saved-ms", f"{saved_s * 1000.0:.1f}".encode())


def emit_outcome(pipe: Pipeline, ex: Exchange, status: int, error_code: str | None) -> None:
    """Builds the outcome and calls every observer; an observer's bug never fails a request."""
    outcome = build_outcome(ex, status, error_code)
    if outcome.saved_s is None and outcome.cache == COALESCED:
        outcome.saved_s = pipe.savings.coalesced_s(ex.model.route.name, outcome)
    for observer in pipe.observers:
        try:
            observer(outcome)
        except Exception:
            _log.exception("metrics observer failed for request %s", ex.request_id)

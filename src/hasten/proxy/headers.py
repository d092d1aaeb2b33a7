"""Headers the gateway relays: request headers sent upstream, response headers passed back."""

from __future__ import annotations

import re
from typing import Any

from hasten.errors import InvalidRequest
from hasten.wire.asgi import JSON_CONTENT_TYPE, SSE_HEADERS, Headers, Scope

# Upstream response headers worth passing back (rate limits, request ids, timings): OpenAI's,
# and Anthropic's, whose SDK reads ``request-id`` and Claude Code its rate limits.
_PASSED_HEADERS = frozenset(
    {
        "openai-processing-ms",
        "openai-version",
        "openai-organization",
        "openai-project",
        "x-request-id",
        "request-id",
        "anthropic-organization-id",
        "x-ratelimit-limit-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "retry-after",
        "retry-after-ms",
        # The router's account of the call (see hasten.upstream.dispatch.Decision).
        "x-hasten-upstream",
        "x-hasten-route",
        "x-hasten-hedge",
        "x-hasten-failover",
    }
)
# Anthropic's rate limit family: requests-, tokens-, input-tokens-, output-tokens-...,
# unified-... (limit, remaining, reset, status).
_PASSED_PREFIX = "anthropic-ratelimit-"
_CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_FORWARDED_REQUEST_HEADERS = frozenset(
    {
        b"openai-organization",
        b"openai-project",
        b"openai-beta",
        # Anthropic's: the API version and betas a Messages client asked for (dropped for an
        # upstream that speaks another API: hasten.upstream.bridge).
        b"anthropic-version",
        b"anthropic-beta",
    }
)
# The caller's own key, passed on where hasten holds no gateway keys: OpenAI's header, or
# Anthropic's.
_CALLER_KEYS = frozenset({b"authorization", b"x-api-key"})
# Of those, what can change the answer (an organisation's or project's models and settings,
# a beta's behaviour): part of the cache key (hasten.cache.request_key.with_headers).
_ANSWER_HEADERS = (
    "openai-beta",
    "openai-organization",
    "openai-project",
    "anthropic-beta",
    "anthropic-version",
)
# W3C trace context: passed on as sent unless the gateway traces (hasten.telemetry), when
# each upstream attempt carries its own span's traceparent instead.
_WITH_TRACE_HEADERS = _FORWARDED_REQUEST_HEADERS | {b"traceparent", b"tracestate"}


def upstream_headers(
    scope: Scope, ex_is_stream: bool, is_passthrough: bool, is_trace_forwarded: bool = True
) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if ex_is_stream else "application/json",
    }
    forwarded = _WITH_TRACE_HEADERS if is_trace_forwarded else _FORWARDED_REQUEST_HEADERS
    # One pass over the request's headers (this runs for every request); a repeated header
    # is forwarded with its first value, as ``header`` reads it.
    for name, value in scope["headers"]:
        if name in forwarded or (is_passthrough and name in _CALLER_KEYS):
            text = name.decode()
            if text not in headers:
                headers[text] = _forwardable(name, value)
    return headers


def answer_headers(forwarded: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The headers of ``forwarded`` (what ``upstream_headers`` built) that can change the
    answer, as (name, value) pairs; none for most requests."""
    return tuple((name, forwarded[name]) for name in _ANSWER_HEADERS if name in forwarded)


def _forwardable(name: bytes, value: bytes) -> str:
    """The text aiohttp writes back as exactly ``value``: it encodes header values as UTF-8
    (and drops what it cannot encode), so only UTF-8 bytes can pass through unchanged."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(
            f"The {name.decode()} header is not valid UTF-8, so it cannot be forwarded unchanged.",
            param=name.decode(),
            code="invalid_header",
        ) from None
    if _CONTROL_CHARACTERS.search(text):
        # aiohttp refuses these (header injection) with a ValueError, a 500 otherwise.
        raise InvalidRequest(
            f"The {name.decode()} header contains a control character.",
            param=name.decode(),
            code="invalid_header",
        )
    return text


def _raw(value: str) -> bytes:
    """The bytes aiohttp read: it decodes response headers as UTF-8 with surrogateescape."""
    return value.encode("utf-8", "surrogateescape")


def response_headers(call_headers: Any, status: int, is_stream: bool) -> Headers:
    headers: Headers = []
    if is_stream and status == 200:
        headers.extend(SSE_HEADERS)
    else:
        content_type = call_headers.get("content-type", "application/json")
        headers.append((b"content-type", _raw(content_type)))
    return _passed(call_headers, headers)


def assembled_headers(call_headers: Any) -> Headers:
    """For a JSON body assembled from the upstream's stream (``hasten.proxy.assemble``)."""
    return _passed(call_headers, [JSON_CONTENT_TYPE])


def _passed(call_headers: Any, headers: Headers) -> Headers:
    for name, value in call_headers.items():
        lowered = name.lower()
        if lowered in _PASSED_HEADERS or lowered.startswith(_PASSED_PREFIX):
            headers.append((lowered.encode(), _raw(value)))
    return headers

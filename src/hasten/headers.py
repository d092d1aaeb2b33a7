"""Headers the gateway relays: request headers sent upstream, response headers passed back."""

from __future__ import annotations

from typing import Any

from hasten.asgi import SSE_HEADERS, Headers, Scope, header

# Upstream response headers worth passing back (rate limits, request ids, timings).
_PASSED_HEADERS = frozenset(
    {
        "openai-processing-ms",
        "openai-version",
        "openai-organization",
        "x-request-id",
        "x-ratelimit-limit-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "retry-after",
        "retry-after-ms",
        # The router's account of the call (see hasten.dispatch.Decision).
        "x-hasten-upstream",
        "x-hasten-route",
        "x-hasten-hedge",
        "x-hasten-failover",
    }
)
_FORWARDED_REQUEST_HEADERS = (b"openai-organization", b"openai-project", b"openai-beta")


def upstream_headers(scope: Scope, ex_is_stream: bool, is_passthrough: bool) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if ex_is_stream else "application/json",
    }
    for name in _FORWARDED_REQUEST_HEADERS:
        value = header(scope, name)
        if value is not None:
            headers[name.decode()] = value.decode("latin-1")
    if is_passthrough:
        authorization = header(scope, b"authorization")
        if authorization is not None:
            headers["authorization"] = authorization.decode("latin-1")
    return headers


def response_headers(call_headers: Any, status: int, is_stream: bool) -> Headers:
    headers: Headers = []
    if is_stream and status == 200:
        headers.extend(SSE_HEADERS)
    else:
        content_type = call_headers.get("content-type", "application/json")
        headers.append((b"content-type", content_type.encode("latin-1")))
    for name, value in call_headers.items():
        lowered = name.lower()
        if lowered in _PASSED_HEADERS:
            headers.append((lowered.encode(), value.encode("latin-1")))
    return headers

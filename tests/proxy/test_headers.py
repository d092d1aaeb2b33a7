"""Unit tests for hasten.proxy.headers: which upstream response headers reach the client."""

from __future__ import annotations

from hasten.proxy.headers import assembled_headers, response_headers

UPSTREAM = {
    "Content-Type": "application/json",
    "request-id": "req_011",
    "anthropic-organization-id": "org-1",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-unified-status": "allowed",
    "x-request-id": "req_abc",
    "openai-project": "proj_1",
    "x-ratelimit-remaining-tokens": "999",
    "set-cookie": "session=1",
    "server": "upstream/1.0",
    "x-anthropic-internal": "no",
}
PASSED = {
    b"request-id",
    b"anthropic-organization-id",
    b"anthropic-ratelimit-requests-remaining",
    b"anthropic-ratelimit-unified-status",
    b"x-request-id",
    b"openai-project",
    b"x-ratelimit-remaining-tokens",
}


def test_openai_and_anthropic_ids_and_rate_limits_pass_and_nothing_else() -> None:
    for headers in (response_headers(UPSTREAM, 200, False), assembled_headers(UPSTREAM)):
        names = {name for name, _ in headers}
        assert names == PASSED | {b"content-type"}
        assert (b"request-id", b"req_011") in headers

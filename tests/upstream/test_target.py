"""What a URL means on the wire (pure: no sockets)."""

from __future__ import annotations

import pytest

from hasten.errors import UpstreamError
from hasten.upstream.proxies import Proxy
from hasten.upstream.target import request_head, route_for
from hasten.upstream.transport import UpstreamRequest

PROXIES = {"http": "http://u:pw@proxy:3128", "https": "http://proxy:3128"}


def _request(url: str, **changes: object) -> UpstreamRequest:
    fields: dict[str, object] = {
        "method": "POST",
        "url": url,
        "headers": {"content-type": "application/json"},
        "body": b"{}",
        "connect_timeout_s": 1.0,
        "first_byte_timeout_s": 1.0,
    }
    fields.update(changes)
    return UpstreamRequest(**fields)  # type: ignore[arg-type]


def _head(url: str, proxies: dict[str, str] | None = None, **changes: object) -> str:
    return request_head(_request(url, **changes), route_for(url, proxies or {})).decode()


def test_origin_form_with_default_port_left_out_of_host() -> None:
    route = route_for("https://api.example.com/v1/chat/completions?x=1", {})
    assert (route.origin.scheme, route.origin.host, route.origin.port) == (
        "https",
        "api.example.com",
        443,
    )
    assert (route.target, route.host_header) == ("/v1/chat/completions?x=1", "api.example.com")


def test_explicit_port_and_ipv6_host() -> None:
    route = route_for("http://[::1]:8000/v1", {})
    assert (route.origin.host, route.origin.port, route.host_header) == ("::1", 8000, "[::1]:8000")


def test_http_through_a_proxy_is_absolute_form_with_its_credentials() -> None:
    head = _head("http://up.example:8000/v1/x", PROXIES)
    assert head.startswith("POST http://up.example:8000/v1/x HTTP/1.1\r\n")
    assert "proxy-authorization: Basic dTpwdw==\r\n" in head


def test_https_through_a_proxy_is_origin_form_without_proxy_credentials() -> None:
    route = route_for("https://up.example/v1", PROXIES)
    assert route.origin.proxy == Proxy("proxy", 3128)
    head = request_head(_request("https://up.example/v1"), route).decode()
    assert head.startswith("POST /v1 HTTP/1.1\r\n") and "proxy-authorization" not in head


def test_spaces_in_a_path_are_quoted() -> None:
    assert route_for("http://h/a b/c%20d", {}).target == "/a%20b/c%20d"


def test_head_carries_the_body_length_and_not_the_callers_framing_headers() -> None:
    head = _head("http://h/v1", headers={"Host": "evil", "Content-Length": "99", "x-a": "1"})
    assert head == "POST /v1 HTTP/1.1\r\nhost: h\r\nx-a: 1\r\ncontent-length: 2\r\n\r\n"


def test_post_without_a_body_says_length_zero_and_get_says_nothing() -> None:
    assert "content-length: 0\r\n" in _head("http://h/", body=None)
    assert "content-length" not in _head("http://h/", method="GET", body=None)


@pytest.mark.parametrize(
    "headers",
    [{"x": "a\r\nInjected: 1"}, {"x": "a\nb"}, {"bad\r\nname": "v"}, {"a:b": "v"}],
)
def test_headers_that_would_break_the_request_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(UpstreamError, match="would break the request"):
        _head("http://h/", headers=headers)

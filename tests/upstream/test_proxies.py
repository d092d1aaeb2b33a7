"""Proxy choice from the environment's table, as urllib reads it (pure: no sockets)."""

from __future__ import annotations

import base64

import pytest

from hasten.errors import UpstreamConnectError
from hasten.upstream.proxies import Proxy, is_loopback, parse_proxy, proxy_for


def test_no_proxy_configured_goes_direct() -> None:
    assert proxy_for("https", "api.example.com", 443, {}) is None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("engine.localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("10.0.0.1", False),
        ("localhost.example.com", False),
        ("api.openai.com", False),
    ],
)
def test_loopback_hosts_are_never_proxied(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected
    proxies = {"http": "http://proxy:3128"}
    assert (proxy_for("http", host, 8080, proxies) is None) is expected


def test_proxy_by_scheme() -> None:
    proxies = {"http": "http://p1:3128", "https": "http://p2:8080"}
    assert proxy_for("http", "a.example", 80, proxies) == Proxy("p1", 3128)
    assert proxy_for("https", "a.example", 443, proxies) == Proxy("p2", 8080)


@pytest.mark.parametrize(
    ("no_proxy", "host", "is_bypassed"),
    [
        ("example.com", "api.example.com", True),
        (".example.com", "api.example.com", True),
        ("example.com", "example.org", False),
        ("*", "anything.at.all", True),
        ("localhost,127.0.0.1", "127.0.0.1", True),
        ("a.example:8443", "a.example", False),  # another port
    ],
)
def test_no_proxy_bypasses_as_urllib_does(no_proxy: str, host: str, is_bypassed: bool) -> None:
    proxies = {"https": "http://proxy:3128", "no": no_proxy}
    assert (proxy_for("https", host, 443, proxies) is None) is is_bypassed


def test_credentials_become_proxy_authorization_and_are_not_shown() -> None:
    proxy = parse_proxy("http://user%40corp:p%3Ass@proxy:3128")
    expected = base64.b64encode(b"user@corp:p:ss").decode()
    assert proxy.authorization == f"Basic {expected}"
    assert "p:ss" not in repr(proxy) and expected not in repr(proxy)


def test_bare_host_port_is_an_http_proxy() -> None:
    assert parse_proxy("proxy.internal:3128") == Proxy("proxy.internal", 3128)
    assert parse_proxy("http://proxy.internal") == Proxy("proxy.internal", 80)


def test_unsupported_proxy_scheme_is_refused_without_its_credentials() -> None:
    with pytest.raises(UpstreamConnectError) as caught:
        parse_proxy("socks5://user:secret@proxy:1080")
    assert "socks5" in str(caught.value) and "secret" not in str(caught.value)

"""Which proxy, if any, an upstream URL goes through: the environment's, as urllib reads it.

HTTP_PROXY / HTTPS_PROXY / NO_PROXY in either case (``urllib.request.getproxies``, lower
case winning), bypassed as ``urllib.request.proxy_bypass_environment`` decides. A loopback
host is never proxied, as Go's ProxyFromEnvironment does: the local engine and a simulator
on 127.0.0.1 stay reachable for a user whose shell exports a corporate proxy. Pure: the
proxy table is an argument, read from the environment once by the caller.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

# Undocumented but stable since 2.x, and the pure half of proxy_bypass (typeshed omits it).
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]

from hasten.errors import UpstreamConnectError

_DEFAULT_PROXY_PORT = 80


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy; ``authorization`` is the Proxy-Authorization value (never logged)."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)


def proxy_for(scheme: str, host: str, port: int, proxies: Mapping[str, str]) -> Proxy | None:
    """The proxy for ``scheme://host:port`` under ``proxies`` (getproxies' shape), or None."""
    url = proxies.get(scheme)
    if not url or is_loopback(host):
        return None
    if proxy_bypass_environment(f"{host}:{port}", dict(proxies)):
        return None
    return parse_proxy(url)


def is_loopback(host: str) -> bool:
    """``localhost`` (and its subdomains) or a loopback IP address."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_proxy(url: str) -> Proxy:
    """An ``http://[user:password@]host[:port]`` proxy URL (a bare ``host:port`` too)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http":
        # Only the scheme is named: the URL may carry credentials.
        raise UpstreamConnectError(f"a {parts.scheme}:// proxy is not supported (http:// only)")
    try:
        port = parts.port or _DEFAULT_PROXY_PORT
    except ValueError:
        raise UpstreamConnectError("the proxy URL from the environment has a bad port") from None
    if not parts.hostname:
        raise UpstreamConnectError("the proxy URL from the environment has no host")
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")
    return Proxy(parts.hostname, port, authorization)

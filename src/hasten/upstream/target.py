"""What an upstream URL means on the wire: where to connect, and the request head to write.

Pure: the proxy table is an argument (``hasten.upstream.proxies``); the lean client caches
each URL's ``Route`` and writes ``request_head`` in one piece with the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from hasten.errors import UpstreamError
from hasten.upstream.proxies import Proxy, proxy_for
from hasten.upstream.transport import UpstreamRequest

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Headers the client writes itself; a caller's copy would duplicate or contradict them.
_OWN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "proxy-authorization"}
)
_SAFE_TARGET_CHARACTERS = "/%:@!$&'()*+,;=-._~?"


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    proxy: Proxy | None


@dataclass(frozen=True, slots=True)
class Route:
    """What a URL means on the wire: where to connect and what to write."""

    origin: Origin
    target: str  # origin-form, or absolute-form through an http proxy
    host_header: str


def route_for(url: str, proxies: Mapping[str, str]) -> Route:
    """Parses ``url``; raises ``UpstreamError`` for one the client cannot send."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UpstreamError("upstream request failed: the upstream URL is invalid") from None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        raise UpstreamError("upstream request failed: only http:// and https:// URLs are sent")
    if parts.username is not None:
        # The config refuses these; one built past it must not leak them on the wire either.
        raise UpstreamError("upstream request failed: the upstream URL carries credentials")
    default_port = _DEFAULT_PORTS[scheme]
    named_host = f"[{host}]" if ":" in host else host
    host_header = named_host if port in (None, default_port) else f"{named_host}:{port}"
    path = quote(parts.path or "/", safe=_SAFE_TARGET_CHARACTERS)
    target = f"{path}?{quote(parts.query, safe=_SAFE_TARGET_CHARACTERS)}" if parts.query else path
    proxy = proxy_for(scheme, host, port or default_port, proxies)
    if proxy is not None and scheme == "http":
        target = f"http://{host_header}{target}"
    return Route(Origin(scheme, host, port or default_port, proxy), target, host_header)


def request_head(request: UpstreamRequest, route: Route) -> bytes:
    """The request line and headers; ``UpstreamError`` for a header that would inject lines."""
    lines = [f"{request.method} {route.target} HTTP/1.1\r\nhost: {route.host_header}\r\n"]
    for name, value in request.headers.items():
        if name.lower() in _OWN_HEADERS:
            continue
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise UpstreamError("upstream request failed: a header would break the request")
        lines.append(f"{name}: {value}\r\n")
    if request.body is not None or request.method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(request.body or b'')}\r\n")
    proxy = route.origin.proxy
    if proxy is not None and proxy.authorization and route.origin.scheme == "http":
        lines.append(f"proxy-authorization: {proxy.authorization}\r\n")
    lines.append("\r\n")
    try:
        return "".join(lines).encode("utf-8")
    except UnicodeEncodeError:
        raise UpstreamError("upstream request failed: a header is not encodable") from None

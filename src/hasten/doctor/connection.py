"""The connection phases on raw asyncio streams: DNS, TCP connect, TLS handshake.

An HTTP client hides these inside its pool, so they are timed here on connections of
their own, opened and closed once per try.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from hasten.errors import DoctorError


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str
    host: str
    port: int
    is_tls: bool


def parse_target(base_url: str) -> Target:
    """Raises DoctorError unless ``base_url`` is an http(s) URL with a host."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DoctorError(f"{base_url!r} is not an http(s) URL (e.g. https://api.openai.com/v1)")
    is_tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if is_tls else 80)
    except ValueError:
        raise DoctorError(f"{base_url!r} has an invalid port") from None
    return Target(base_url.strip().rstrip("/"), parts.hostname, port, is_tls)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _ms_since(started_s: float) -> float:
    return (time.perf_counter() - started_s) * 1000.0


async def resolve(target: Target) -> tuple[float | None, tuple[str, ...]]:
    """DNS time (None for an IP literal) and the addresses to try, in the resolver's order."""
    if is_ip_literal(target.host):
        return None, (target.host,)
    loop = asyncio.get_running_loop()
    started_s = time.perf_counter()
    try:
        infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DoctorError(f"cannot resolve {target.host}: {exc.strerror}") from None
    addresses = dict.fromkeys(str(info[4][0]) for info in infos)  # unique, in order
    return _ms_since(started_s), tuple(addresses)


async def time_connections(
    target: Target, addresses: tuple[str, ...], num_tries: int, timeout_s: float
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """TCP connect (and TLS handshake) times of ``num_tries`` fresh connections.

    The first address that accepts is the one timed (``localhost`` may name ::1 first while
    the server listens on 127.0.0.1 only), as an HTTP client's fallback would pick it.
    """
    context = ssl.create_default_context() if target.is_tls else None
    connect_ms: list[float] = []
    tls_ms: list[float] = []
    candidates = list(addresses)
    while len(connect_ms) < num_tries:
        try:
            times = await _time_connection(target, candidates[0], context, timeout_s)
        except DoctorError:
            if len(candidates) == 1 or connect_ms:
                raise
            candidates.pop(0)  # try the next address, as an HTTP client would
            continue
        connect_ms.append(times[0])
        if times[1] is not None:
            tls_ms.append(times[1])
    return tuple(connect_ms), tuple(tls_ms)


async def _time_connection(
    target: Target, address: str, context: ssl.SSLContext | None, timeout_s: float
) -> tuple[float, float | None]:
    where = f"{target.host}:{target.port}"
    tls_ms = None
    try:
        async with asyncio.timeout(timeout_s):
            started_s = time.perf_counter()
            _, writer = await asyncio.open_connection(address, target.port)
            connect_ms = _ms_since(started_s)
            try:
                if context is not None:
                    started_s = time.perf_counter()
                    await writer.start_tls(context, server_hostname=target.host)
                    tls_ms = _ms_since(started_s)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        raise DoctorError(f"no connection to {where} within {timeout_s:g} s") from None
    except ssl.SSLError as exc:
        raise DoctorError(f"TLS handshake with {where} failed: {exc.reason}") from None
    except OSError as exc:
        raise DoctorError(f"cannot connect to {where}: {exc.strerror or exc}") from None
    return connect_ms, tls_ms

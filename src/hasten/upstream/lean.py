"""The lean upstream client: HTTP/1.1 keep-alive pools on asyncio protocols (``http1``).

The same ``Transport`` seam, exceptions and messages as ``AiohttpTransport``, with less in
the way of each request: one write for a request, httptools for its response, body bytes
handed on as they arrive. http and https (verified, SNI), proxies from the environment
(``proxies``: absolute-form for http, a CONNECT tunnel for https), one pool per origin
(scheme, host, port, proxy) with an idle timeout, and a cap on open connections that
callers wait on, within their connect timeout.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from urllib.request import getproxies

from hasten.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from hasten.upstream.http1 import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_NUM_HEADERS,
    Http1Connection,
)
from hasten.upstream.proxies import Proxy
from hasten.upstream.target import Origin, Route, request_head, route_for
from hasten.upstream.transport import (
    DEFAULT_MAX_CONNECTIONS,
    KEEPALIVE_TIMEOUT_S,
    UpstreamRequest,
    UpstreamResponse,
)

MAX_NUM_ROUTES = 1024  # URLs whose parsing is remembered (upstreams x endpoints, in practice)


def idle_expired(
    idle_since_s: Mapping[Http1Connection, float], now_s: float, timeout_s: float
) -> list[Http1Connection]:
    """The connections idle for ``timeout_s`` or more at ``now_s``."""
    return [conn for conn, since_s in idle_since_s.items() if now_s - since_s >= timeout_s]


def _first_byte_timeout(timeout_s: float) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"upstream did not answer within {timeout_s:g} s", code="upstream_first_byte_timeout"
    )


def _connect_timeout(timeout_s: float) -> UpstreamConnectError:
    return UpstreamConnectError(f"connecting to upstream timed out after {timeout_s:g} s")


class LeanResponse:
    """A response being read off its connection, which goes back to the pool once complete."""

    __slots__ = ("_conn", "_origin", "_pool", "headers", "status")

    def __init__(self, pool: LeanTransport, origin: Origin, conn: Http1Connection) -> None:
        self._pool: LeanTransport | None = pool
        self._origin, self._conn = origin, conn
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            chunk = conn.take()
            if chunk:
                yield chunk
            elif conn.error is not None:
                self.close()
                raise conn.error
            elif conn.is_complete:
                self.close()
                return
            elif not await conn.wait(idle_timeout_s):
                self.close()
                raise UpstreamTimeout(
                    f"upstream sent nothing for {idle_timeout_s:g} s mid-response",
                    code="upstream_idle_timeout",
                )

    async def read(self, timeout_s: float) -> bytes:
        conn = self._conn
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + timeout_s
        parts: list[bytes] = []
        while not conn.is_complete and conn.error is None:
            parts.append(conn.take())
            if not await conn.wait(deadline_s - loop.time()):
                self.close()
                raise UpstreamTimeout(f"upstream response not complete within {timeout_s:g} s")
        parts.append(conn.take())
        self.close()
        if conn.error is not None:
            raise conn.error
        return parts[-1] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.release(self._origin, self._conn)


class LeanTransport:
    """Keep-alive pools over ``Http1Connection``; one per gateway process."""

    def __init__(
        self,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        ssl_context: ssl.SSLContext | None = None,
        proxies: Mapping[str, str] | None = None,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_num_headers: int = DEFAULT_MAX_NUM_HEADERS,
    ) -> None:
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._proxies = dict(getproxies() if proxies is None else proxies)
        self._max_header_bytes, self._max_num_headers = max_header_bytes, max_num_headers
        self._routes: dict[str, Route] = {}
        self._idle: dict[Origin, list[Http1Connection]] = {}
        self._idle_since_s: dict[Http1Connection, float] = {}  # the idle ones, by loop time
        self._sweeper: asyncio.TimerHandle | None = None
        self._open: set[Http1Connection] = set()
        self._waiters: list[asyncio.Future[bool]] = []
        self._is_closed = False

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        route = self._route(request.url)
        head = request_head(request, route)
        body = request.body or b""
        # One write for a request of usual size; a big body is not copied to save a syscall.
        is_joined = len(body) < 65536
        data, rest = (head + body, b"") if is_joined else (head, body)
        loop = asyncio.get_running_loop()
        first_byte_deadline_s = loop.time() + request.first_byte_timeout_s
        is_bodiless = request.method == "HEAD"
        for attempt in range(2):
            conn, is_reused = await self._acquire(
                route.origin, request, first_byte_deadline_s, is_fresh=attempt > 0
            )
            try:
                conn.start(data, rest, is_bodiless=is_bodiless)
                while not conn.is_head_done and conn.error is None:
                    if not await conn.wait(first_byte_deadline_s - loop.time()):
                        raise _first_byte_timeout(request.first_byte_timeout_s)
            except BaseException:
                self._drop(conn)  # a timeout or a cancelled caller: the upstream must know
                raise
            if conn.error is None:
                return LeanResponse(self, route.origin, conn)
            self._drop(conn)
            # A pooled connection the upstream had closed before reading our request: once
            # more on a fresh one, as nothing of it can have been processed.
            if not (is_reused and conn.num_response_bytes == 0 and attempt == 0):
                raise conn.error
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self, origin: Origin, conn: Http1Connection) -> None:
        """Back to the pool if complete and keep-alive; else the connection is dropped."""
        if self._is_closed or not (conn.is_complete and conn.is_keep_alive) or conn.is_lost:
            self._drop(conn)
            return
        self._idle.setdefault(origin, []).append(conn)
        loop = asyncio.get_running_loop()
        self._idle_since_s[conn] = loop.time()
        if self._sweeper is None:
            # One timer for the whole pool, not one per release: it costs every request.
            self._sweeper = loop.call_later(KEEPALIVE_TIMEOUT_S, self._sweep)
        self._wake_waiter()

    async def aclose(self) -> None:
        self._is_closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in list(self._idle.values()):
            for conn in list(idle):
                self._drop(conn)
        self._idle.clear()

    # --- the pool -----------------------------------------------------------------------

    def _route(self, url: str) -> Route:
        route = self._routes.get(url)
        if route is None:
            route = route_for(url, self._proxies)
            if len(self._routes) >= MAX_NUM_ROUTES:
                self._routes.clear()
            self._routes[url] = route
        return route

    async def _acquire(
        self, origin: Origin, request: UpstreamRequest, first_byte_deadline_s: float, is_fresh: bool
    ) -> tuple[Http1Connection, bool]:
        if not is_fresh:
            idle = self._idle.get(origin)
            if idle:
                return self._unidle(origin, idle.pop()), True
        loop = asyncio.get_running_loop()
        connect_deadline_s = min(loop.time() + request.connect_timeout_s, first_byte_deadline_s)
        while len(self._open) >= self._max_connections and not self._evict_idle():
            if not await self._wait_for_slot(connect_deadline_s - loop.time()):
                raise self._deadline_error(request, first_byte_deadline_s, connect_deadline_s)
            idle = self._idle.get(origin)
            if idle and not is_fresh:
                return self._unidle(origin, idle.pop()), True
        try:
            async with asyncio.timeout_at(connect_deadline_s):
                conn = await self._connect(origin)
        except TimeoutError:
            raise self._deadline_error(request, first_byte_deadline_s, connect_deadline_s) from None
        return conn, False

    async def _connect(self, origin: Origin) -> Http1Connection:
        loop = asyncio.get_running_loop()
        proxy = origin.proxy
        is_tls = origin.scheme == "https"
        conn = Http1Connection(
            max_header_bytes=self._max_header_bytes, max_num_headers=self._max_num_headers
        )
        self._open.add(conn)  # counted from the start: the cap holds connects in flight
        conn.on_lost = self._lost
        try:
            if proxy is None:
                await loop.create_connection(
                    lambda: conn,
                    origin.host,
                    origin.port,
                    ssl=self._ssl() if is_tls else None,
                    server_hostname=origin.host if is_tls else None,
                )
            else:
                await loop.create_connection(lambda: conn, proxy.host, proxy.port)
                if is_tls:
                    await self._tunnel(conn, origin, proxy)
        except (asyncio.CancelledError, UpstreamError):
            self._drop(conn)
            raise
        except ssl.SSLCertVerificationError as exc:
            self._drop(conn)
            raise UpstreamConnectError(
                f"cannot connect to upstream: certificate not trusted ({exc.verify_message})"
            ) from None
        except OSError as exc:
            self._drop(conn)
            raise UpstreamConnectError(f"cannot connect to upstream: {exc}") from None
        except Exception as exc:
            # A host the resolver will not take (ValueError, UnicodeError...): only the type,
            # as messages may quote the URL.
            self._drop(conn)
            raise UpstreamConnectError(
                f"cannot connect to upstream: {type(exc).__name__}"
            ) from None
        return conn

    async def _tunnel(self, conn: Http1Connection, origin: Origin, proxy: Proxy) -> None:
        """CONNECT through ``proxy``, then TLS with the upstream inside the tunnel."""
        authority = f"{origin.host}:{origin.port}"
        lines = [f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n"]
        if proxy.authorization:
            lines.append(f"proxy-authorization: {proxy.authorization}\r\n")
        conn.start("".join((*lines, "\r\n")).encode("utf-8"), is_bodiless=True)
        while not conn.is_complete and conn.error is None:
            await conn.wait(3600.0)  # the caller's connect deadline bounds this
        if conn.error is not None:
            raise UpstreamConnectError(f"the proxy failed: {conn.error}")
        if not 200 <= conn.status < 300:
            raise UpstreamConnectError(f"the proxy refused the tunnel with status {conn.status}")
        loop = asyncio.get_running_loop()
        assert conn.transport is not None
        transport = await loop.start_tls(
            conn.transport, conn, self._ssl(), server_hostname=origin.host
        )
        if transport is None:
            raise UpstreamConnectError("the proxy closed the tunnel during TLS")
        conn.transport = transport

    def _ssl(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _unidle(self, origin: Origin, conn: Http1Connection) -> Http1Connection:
        del self._idle_since_s[conn]
        return conn

    def _evict_idle(self) -> bool:
        """Closes one idle connection (of any origin) to make room; False if none is idle."""
        for idle in self._idle.values():
            if idle:
                self._drop(idle[0])
                return True
        return False

    async def _wait_for_slot(self, timeout_s: float) -> bool:
        if timeout_s <= 0:
            return False
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                return await waiter
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake_waiter(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(True)
                return

    def _deadline_error(
        self, request: UpstreamRequest, first_byte_deadline_s: float, connect_deadline_s: float
    ) -> UpstreamError:
        if first_byte_deadline_s <= connect_deadline_s:
            return _first_byte_timeout(request.first_byte_timeout_s)
        return _connect_timeout(request.connect_timeout_s)

    def _sweep(self) -> None:
        """Closes connections idle for KEEPALIVE_TIMEOUT_S; comes back for the rest."""
        self._sweeper = None
        now_s = asyncio.get_running_loop().time()
        expired = idle_expired(self._idle_since_s, now_s, KEEPALIVE_TIMEOUT_S)
        for conn in expired:
            self._drop(conn)
        if self._idle_since_s and not self._is_closed:
            oldest_s = min(self._idle_since_s.values())
            delay_s = max(0.0, oldest_s + KEEPALIVE_TIMEOUT_S - now_s)
            self._sweeper = asyncio.get_running_loop().call_later(delay_s, self._sweep)

    def _lost(self, conn: Http1Connection) -> None:
        if conn in self._idle_since_s:  # an idle one the upstream closed: out of the pool now
            self._drop(conn)

    def _drop(self, conn: Http1Connection) -> None:
        """Closes ``conn`` and forgets it; a waiter for a free slot gets its turn."""
        conn.abort()
        if self._idle_since_s.pop(conn, None) is not None:
            for idle in self._idle.values():
                if conn in idle:
                    idle.remove(conn)
                    break
        if conn in self._open:
            self._open.discard(conn)
            self._wake_waiter()

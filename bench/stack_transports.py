"""Candidate upstream clients behind hasten's ``Transport`` seam, for ``bench/stack.py``.

Each adapter does what ``hasten.upstream.transport.AiohttpTransport`` does (keep-alive pool,
streamed body, connect and first-byte timeouts, close = cancel) with another library, so
the gateway can be measured with each in one run. They are measured here before any of them
is considered for the product: only a winner would be hardened (proxies from the
environment, TLS settings, the whole test suite) and moved into ``src/``.

- ``pyreqwest``: Rust's reqwest (hyper) via PyO3, its own Tokio runtime;
- ``rnet``: another reqwest binding (with browser impersonation we do not use);
- ``lean``: asyncio protocols plus httptools' response parser, HTTP/1.1 keep-alive only.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

from hasten.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from hasten.upstream.transport import UpstreamRequest, UpstreamResponse

MAX_CONNECTIONS = 512


class _Closers:
    """Holds the close tasks a sync ``close()`` starts, so none is collected mid-flight."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Future[Any]] = set()

    def start(self, awaitable: Any) -> None:
        task = asyncio.ensure_future(awaitable)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _first_byte_timeout(timeout_s: float) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"upstream did not answer within {timeout_s:g} s", code="upstream_first_byte_timeout"
    )


def _idle_timeout(timeout_s: float) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"upstream sent nothing for {timeout_s:g} s mid-response", code="upstream_idle_timeout"
    )


# --- pyreqwest ----------------------------------------------------------------------------------


class _PyreqwestResponse:
    __slots__ = ("_closers", "_context", "_reader", "headers", "status")

    def __init__(self, context: Any, response: Any, closers: _Closers) -> None:
        self._context, self._closers = context, closers
        self._reader = response.body_reader
        self.status = response.status
        self.headers: Mapping[str, str] = dict(response.headers.items())

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await self._reader.read_chunk()
            except TimeoutError:
                raise _idle_timeout(idle_timeout_s) from None
            except Exception as exc:
                raise UpstreamError(f"upstream connection failed mid-response: {exc}") from None
            if chunk is None:
                return
            yield bytes(chunk)

    async def read(self, timeout_s: float) -> bytes:
        async with asyncio.timeout(timeout_s):
            return bytes(await self._reader.bytes())

    def close(self) -> None:
        self._closers.start(self._context.__aexit__(None, None, None))


class PyreqwestTransport:
    def __init__(self) -> None:
        from pyreqwest.client import ClientBuilder

        builder = ClientBuilder().max_connections(MAX_CONNECTIONS).http1_only()
        builder = builder.gzip(False).follow_redirects(False).no_proxy()
        self._client = builder.build()
        self._closers = _Closers()

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        builder = self._client.request(request.method, request.url).headers(dict(request.headers))
        if request.body is not None:
            builder = builder.body_bytes(request.body)
        context = builder.build_streamed()
        try:
            async with asyncio.timeout(request.first_byte_timeout_s):
                response = await context.__aenter__()
        except TimeoutError:
            raise _first_byte_timeout(request.first_byte_timeout_s) from None
        except Exception as exc:
            raise UpstreamConnectError(f"upstream request failed: {type(exc).__name__}") from None
        return _PyreqwestResponse(context, response, self._closers)

    async def aclose(self) -> None:
        await self._client.close()


# --- rnet -------------------------------------------------------------------------------------


class _RnetResponse:
    __slots__ = ("_closers", "_response", "headers", "status")

    def __init__(self, response: Any, closers: _Closers) -> None:
        self._response, self._closers = response, closers
        self.status = int(response.status)
        self.headers: Mapping[str, str] = {
            k.decode() if isinstance(k, bytes) else str(k): v.decode()
            if isinstance(v, bytes)
            else str(v)
            for k, v in response.headers.items()
        }

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        stream = self._response.stream()
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await stream.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise _idle_timeout(idle_timeout_s) from None
            except Exception as exc:
                raise UpstreamError(f"upstream connection failed mid-response: {exc}") from None
            yield bytes(chunk)

    async def read(self, timeout_s: float) -> bytes:
        async with asyncio.timeout(timeout_s):
            return bytes(await self._response.bytes())

    def close(self) -> None:
        self._closers.start(self._response.close())


class RnetTransport:
    def __init__(self) -> None:
        import rnet

        self._rnet = rnet
        self._client = rnet.Client(
            no_proxy=True, gzip=False, brotli=False, deflate=False, zstd=False, http1_only=True
        )
        self._closers = _Closers()

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        method = getattr(self._rnet.Method, request.method.upper())
        try:
            async with asyncio.timeout(request.first_byte_timeout_s):
                response = await self._client.request(
                    method,
                    request.url,
                    headers=dict(request.headers),
                    body=request.body,
                    connect_timeout=datetime.timedelta(seconds=request.connect_timeout_s),
                )
        except TimeoutError:
            raise _first_byte_timeout(request.first_byte_timeout_s) from None
        except Exception as exc:
            raise UpstreamConnectError(f"upstream request failed: {type(exc).__name__}") from None
        return _RnetResponse(response, self._closers)

    async def aclose(self) -> None:
        return None


# --- lean: asyncio protocol + httptools ---------------------------------------------------------


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; httptools parses the response (chunked decoding included)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done: asyncio.Future[None] | None = None
        self.body: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.is_complete = False
        self.is_reusable = False
        self.is_lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"upstream sent an unparseable response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_lost = True
        if not self.is_complete:
            self._fail(UpstreamConnectError("upstream closed the connection"))

    def _fail(self, error: Exception) -> None:
        if self.head_done is not None and not self.head_done.done():
            self.head_done.set_exception(error)
        else:
            self.body.put_nowait(None)
        self.is_reusable = False

    def start(self, head: bytes, body: bytes | None) -> None:
        self.status, self.headers, self.is_complete = 0, {}, False
        self.head_done = asyncio.get_running_loop().create_future()
        self.body = asyncio.Queue()
        assert self.transport is not None
        self.transport.write(head + body if body else head)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.head_done is not None and not self.head_done.done():
            self.head_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.body.put_nowait(body)

    def on_message_complete(self) -> None:
        self.is_complete = True
        self.is_reusable = self.parser.should_keep_alive()
        self.body.put_nowait(None)


class _LeanResponse:
    __slots__ = ("_conn", "_pool", "_release_key", "headers", "status")

    def __init__(self, pool: LeanTransport, key: tuple[str, int], conn: _Connection) -> None:
        self._pool, self._release_key, self._conn = pool, key, conn
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await conn.body.get()
            except TimeoutError:
                raise _idle_timeout(idle_timeout_s) from None
            if chunk is None:
                if not conn.is_complete:
                    raise UpstreamError("upstream connection failed mid-response")
                return
            yield chunk

    async def read(self, timeout_s: float) -> bytes:
        parts = []
        async with asyncio.timeout(timeout_s):
            async for chunk in self.iter_chunks(timeout_s):
                parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self._pool.release(self._release_key, self._conn)


class LeanTransport:
    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], deque[_Connection]] = {}

    async def _connect(self, host: str, port: int, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(_Connection, host, port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamConnectError(f"cannot connect to upstream: {exc}") from None
        return conn

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        url = urlsplit(request.url)
        if url.scheme != "http":
            raise UpstreamConnectError("the lean client speaks plain http only")
        key = (url.hostname or "", url.port or 80)
        idle = self._idle.get(key)
        conn = None
        while idle:
            candidate = idle.pop()
            if not candidate.is_lost:
                conn = candidate
                break
        if conn is None:
            conn = await self._connect(key[0], key[1], request.connect_timeout_s)
        target = url.path + (f"?{url.query}" if url.query else "")
        lines = [f"{request.method} {target} HTTP/1.1", f"host: {url.netloc}"]
        lines.extend(f"{name}: {value}" for name, value in request.headers.items())
        if request.body is not None:
            lines.append(f"content-length: {len(request.body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn.start(head, request.body)
        assert conn.head_done is not None
        try:
            async with asyncio.timeout(request.first_byte_timeout_s):
                await conn.head_done
        except TimeoutError:
            self._discard(conn)
            raise _first_byte_timeout(request.first_byte_timeout_s) from None
        return _LeanResponse(self, key, conn)

    def release(self, key: tuple[str, int], conn: _Connection) -> None:
        if conn.is_complete and conn.is_reusable and not conn.is_lost:
            self._idle.setdefault(key, deque()).append(conn)
        else:
            self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        if conn.transport is not None:
            conn.transport.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                self._discard(conn)
        self._idle.clear()


def transport_named(name: str) -> Any:
    """The transport for ``name``; None means hasten's own (aiohttp)."""
    if name == "aiohttp":
        return None
    return {"pyreqwest": PyreqwestTransport, "rnet": RnetTransport, "lean": LeanTransport}[name]()

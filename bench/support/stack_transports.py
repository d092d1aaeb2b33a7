"""Candidate upstream clients behind hasten's ``Transport`` seam, for ``bench/overhead/stack.py``.

Each adapter does what ``hasten.upstream.transport.AiohttpTransport`` does (keep-alive pool,
streamed body, connect and first-byte timeouts, close = cancel) with another library, so
the gateway can be measured with each in one run. They are measured here before any of them
is considered for the product: only a winner would be hardened (proxies from the
environment, TLS settings, the whole test suite) and moved into ``src/``.

- ``pyreqwest``: Rust's reqwest (hyper) via PyO3, its own Tokio runtime;
- ``rnet``: another reqwest binding (with browser impersonation we do not use);
- ``lean``: hasten's own since it won here (``hasten.upstream.lean``, asyncio protocols
  plus httptools), measured as the product ships it.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Mapping
from typing import Any

from hasten.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from hasten.upstream.lean import LeanTransport
from hasten.upstream.transport import AiohttpTransport, UpstreamRequest, UpstreamResponse

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


def transport_named(name: str) -> Any:
    """The transport for ``name``: hasten's two (lean, aiohttp) or a candidate here."""
    clients = {
        "aiohttp": AiohttpTransport,
        "lean": LeanTransport,
        "pyreqwest": PyreqwestTransport,
        "rnet": RnetTransport,
    }
    return clients[name]()

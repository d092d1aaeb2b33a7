"""The one seam between hasten and the network: ``Transport.send``.

Everything above this module sees ``UpstreamResponse`` and hasten's own exceptions;
aiohttp's exception zoo is translated here, at the boundary, and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from hasten.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout

DEFAULT_MAX_CONNECTIONS = 512
KEEPALIVE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None
    connect_timeout_s: float
    first_byte_timeout_s: float


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        """Yields body bytes as they arrive, without re-chunking."""
        ...

    async def read(self, timeout_s: float) -> bytes: ...

    def close(self) -> None:
        """Drops the connection (cancels the upstream request) unless fully read."""
        ...


class Transport(Protocol):
    async def send(self, request: UpstreamRequest) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


class _AiohttpResponse:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        content = self._response.content
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    chunk = await content.readany()
            except TimeoutError:
                raise UpstreamTimeout(
                    f"upstream sent nothing for {idle_timeout_s:g} s mid-response",
                    code="upstream_idle_timeout",
                ) from None
            except aiohttp.ClientError as exc:
                raise UpstreamError(f"upstream connection failed mid-response: {exc}") from None
            if not chunk:
                return
            yield chunk

    async def read(self, timeout_s: float) -> bytes:
        try:
            async with asyncio.timeout(timeout_s):
                return await self._response.read()
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream response not complete within {timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"upstream connection failed mid-response: {exc}") from None

    def close(self) -> None:
        self._response.close()


class AiohttpTransport:
    """Keep-alive connection pool over aiohttp; one per gateway process."""

    def __init__(self, *, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        # Built lazily so the session binds to the running loop, not the importing one.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                keepalive_timeout=KEEPALIVE_TIMEOUT_S,
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=request.connect_timeout_s)
        try:
            async with asyncio.timeout(request.first_byte_timeout_s):
                response = await session.request(
                    request.method,
                    request.url,
                    data=request.body,
                    headers=dict(request.headers),
                    timeout=timeout,
                    allow_redirects=False,
                )
        except aiohttp.ServerTimeoutError:
            # Before TimeoutError, which it subclasses: a connect timeout is retryable and
            # must not be reported as a slow first byte.
            raise UpstreamConnectError(
                f"connecting to upstream timed out after {request.connect_timeout_s:g} s"
            ) from None
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream did not answer within {request.first_byte_timeout_s:g} s",
                code="upstream_first_byte_timeout",
            ) from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamConnectError(f"cannot connect to upstream: {exc.os_error}") from None
        except aiohttp.ServerDisconnectedError:
            # A pooled keep-alive connection the upstream had already closed.
            raise UpstreamConnectError("upstream closed the connection before answering") from None
        except Exception as exc:
            # aiohttp raises more than ClientError (ValueError for a URL it will not combine
            # with our headers, say): each is a failed attempt, never a 500 or a lost count.
            # Only the type is shown: messages may quote the URL.
            raise UpstreamError(f"upstream request failed: {type(exc).__name__}") from None
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

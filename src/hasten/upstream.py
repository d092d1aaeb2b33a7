"""Resilient upstream calls: retries with backoff and Retry-After, then ordered fallbacks.

Retries happen only while opening the call, i.e. before any byte has reached the client;
once a response is flowing it is forwarded or ended with an error, never replayed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from hasten.config import UpstreamConfig
from hasten.errors import HastenError, UpstreamError, UpstreamTimeout
from hasten.retry import is_retryable_status, parse_retry_after_s, retry_delay_s
from hasten.transport import (
    Transport,
    UpstreamConnectError,
    UpstreamRequest,
    UpstreamResponse,
)

_log = logging.getLogger("hasten.upstream")
ERROR_BODY_TIMEOUT_S = 5.0


class BufferedResponse:
    """A response whose body was already read (a final upstream error we pass through)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        if self.body:
            yield self.body

    async def read(self, timeout_s: float) -> bytes:
        return self.body

    def close(self) -> None:
        return None


@dataclass(slots=True)
class UpstreamCall:
    """An open upstream response plus what it took to get it."""

    response: UpstreamResponse
    upstream: UpstreamConfig
    ttfb_ms: float
    deadline_s: float
    num_attempts: int

    @property
    def remaining_s(self) -> float:
        return self.deadline_s - time.monotonic()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive, bounded by the idle gap and the total deadline."""
        idle_s = self.upstream.timeouts.idle_s
        try:
            async with asyncio.timeout_at(_loop_time(self.deadline_s)):
                async for chunk in self.response.iter_chunks(idle_s):
                    yield chunk
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream response exceeded the total timeout of "
                f"{self.upstream.timeouts.total_s:g} s",
                code="upstream_total_timeout",
            ) from None

    async def read(self) -> bytes:
        return await self.response.read(max(0.001, self.remaining_s))


def _loop_time(monotonic_deadline_s: float) -> float:
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline_s - time.monotonic())


class UpstreamClient:
    """Opens calls to an ordered list of upstreams (primary first, then fallbacks)."""

    def __init__(self, transport: Transport, *, rng: random.Random | None = None) -> None:
        self._transport = transport
        self._rng = rng or random.Random()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def open(
        self,
        targets: Sequence[UpstreamConfig],
        path: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> UpstreamCall:
        """Returns the first usable response; raises the last error when none is.

        A non-retryable response (2xx, or a 4xx such as 400) is returned at once. When
        every upstream keeps failing with retryable statuses, the last one is returned so
        the client sees the upstream's own error.
        """
        deadline_s = time.monotonic() + targets[0].timeouts.total_s
        last_error: HastenError | None = None
        last_failure: BufferedResponse | None = None
        num_attempts = 0
        for upstream in targets:
            for attempt in range(upstream.retry.max_retries + 1):
                num_attempts += 1
                retry_after_s: float | None = None
                try:
                    call = await self._attempt(upstream, path, body, headers, deadline_s)
                except UpstreamConnectError as exc:
                    last_error = exc
                except UpstreamTimeout as exc:
                    last_error = exc
                    break  # a slow upstream stays slow: fall back rather than retry
                else:
                    if not is_retryable_status(call.response.status):
                        call.num_attempts = num_attempts
                        return call
                    last_failure = await _buffer(call)
                    retry_after_s = parse_retry_after_s(last_failure.headers)
                    _log.warning(
                        "upstream %s answered %d (attempt %d)",
                        upstream.name,
                        last_failure.status,
                        attempt + 1,
                    )
                delay_s = retry_delay_s(
                    attempt,
                    upstream.retry,
                    self._rng,
                    retry_after_s=retry_after_s,
                    remaining_s=deadline_s - time.monotonic(),
                )
                if delay_s is None:
                    break
                await asyncio.sleep(delay_s)
            if deadline_s <= time.monotonic():
                break
        if last_failure is not None:
            return UpstreamCall(last_failure, targets[-1], 0.0, deadline_s, num_attempts)
        raise last_error or UpstreamError("no upstream available")

    async def _attempt(
        self,
        upstream: UpstreamConfig,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline_s: float,
    ) -> UpstreamCall:
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise UpstreamTimeout("request deadline passed before the upstream answered")
        request_headers = dict(headers)
        if upstream.api_key:
            request_headers["authorization"] = f"Bearer {upstream.api_key}"
        request = UpstreamRequest(
            method="POST" if body else "GET",
            url=upstream.url + path,
            headers=request_headers,
            body=body or None,
            connect_timeout_s=min(upstream.timeouts.connect_s, remaining_s),
            first_byte_timeout_s=min(upstream.timeouts.first_byte_s, remaining_s),
        )
        started_s = time.perf_counter()
        response = await self._transport.send(request)
        ttfb_ms = (time.perf_counter() - started_s) * 1000.0
        return UpstreamCall(response, upstream, ttfb_ms, deadline_s, 1)


async def _buffer(call: UpstreamCall) -> BufferedResponse:
    try:
        body = await call.response.read(min(ERROR_BODY_TIMEOUT_S, max(0.001, call.remaining_s)))
    except HastenError:
        body = b""
    finally:
        call.response.close()
    # Lower-cased: aiohttp title-cases names, and the retry policy looks them up by name.
    headers = {name.lower(): value for name, value in call.response.headers.items()}
    return BufferedResponse(call.response.status, headers, body)

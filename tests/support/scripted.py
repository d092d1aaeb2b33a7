"""A scripted ``Transport`` for unit tests of the upstream path: no sockets, no aiohttp.

Each upstream (by URL host) answers from its own list of ``Reply``; the last one repeats.
Every request sent and every response handed out is kept, so a test can check what went
upstream and that every response was closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

from hasten.config import RetryConfig, TimeoutConfig, UpstreamConfig
from hasten.errors import HastenError
from hasten.upstream.transport import UpstreamRequest

NO_RETRY = RetryConfig(max_retries=0)
QUICK_RETRY = RetryConfig(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.002)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    chunks: tuple[bytes, ...] = (b'{"ok": true}',)
    headers: Mapping[str, str] = field(default_factory=lambda: {"x-request-id": "up-1"})
    head_delay_s: float = 0.0  # before the status line
    chunk_delay_s: float = 0.0  # before each body chunk
    error: HastenError | None = None  # raised by ``send`` instead of answering


def sse(*events: Mapping[str, object] | str) -> tuple[bytes, ...]:
    """SSE frames: dicts as JSON events, strings (``[DONE]``) as they are."""
    return tuple(
        b"data: " + (e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n\n"
        for e in events
    )


def delta(content: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": content}}]}


def upstream(name: str, *, retry: RetryConfig = NO_RETRY, total_s: float = 10.0) -> UpstreamConfig:
    timeouts = TimeoutConfig(connect_s=1.0, first_byte_s=5.0, idle_s=5.0, total_s=total_s)
    return UpstreamConfig(name=name, url=f"http://{name}.test/v1", timeouts=timeouts, retry=retry)


class ScriptedResponse:
    def __init__(self, reply: Reply) -> None:
        self.status, self.headers = reply.status, reply.headers
        self._reply = reply
        self.is_closed = False

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        for chunk in self._reply.chunks:
            if self._reply.chunk_delay_s:
                await asyncio.sleep(self._reply.chunk_delay_s)
            yield chunk

    async def read(self, timeout_s: float) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks(timeout_s)])

    def close(self) -> None:
        self.is_closed = True


class ScriptedTransport:
    def __init__(self, replies: Mapping[str, Sequence[Reply]]) -> None:
        self._replies = {name: list(script) for name, script in replies.items()}
        self.sent: list[UpstreamRequest] = []
        self.responses: list[ScriptedResponse] = []
        self.is_closed = False

    def sent_to(self, name: str) -> list[UpstreamRequest]:
        return [r for r in self.sent if urlsplit(r.url).hostname == f"{name}.test"]

    async def send(self, request: UpstreamRequest) -> ScriptedResponse:
        self.sent.append(request)
        name = (urlsplit(request.url).hostname or "").removesuffix(".test")
        script = self._replies[name]
        reply = script.pop(0) if len(script) > 1 else script[0]
        if reply.head_delay_s:
            await asyncio.sleep(reply.head_delay_s)
        if reply.error is not None:
            raise reply.error
        response = ScriptedResponse(reply)
        self.responses.append(response)
        return response

    async def aclose(self) -> None:
        self.is_closed = True

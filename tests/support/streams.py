"""Clients of a fleet: chat streams read to the end (or to where they broke), each with the
replica the balancer sent it to, and many of them at once."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from tests.support.balancer import REPLICA_HEADER

CLIENT_TIMEOUT_S = 60.0


@dataclass(slots=True)
class StreamAnswer:
    """What one stream client got: the text of its deltas, and whether it ended properly."""

    status: int = 0
    replica: str = ""  # the balancer's REPLICA_HEADER value; "" when called directly
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    num_content_chunks: int = 0
    finish_reason: str | None = None
    is_done: bool = False  # the stream ended with `data: [DONE]`
    error: str | None = None  # a transport error or an error event

    @property
    def is_complete(self) -> bool:
        return (
            self.status == 200
            and self.is_done
            and self.error is None
            and self.finish_reason is not None
        )


def new_client(max_connections: int = 256) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=32)
    return httpx.AsyncClient(limits=limits, timeout=CLIENT_TIMEOUT_S)


def _read_event(answer: StreamAnswer, data: bytes) -> None:
    if data == b"[DONE]":
        answer.is_done = True
        return
    event: dict[str, Any] = orjson.loads(data)
    if "error" in event:
        answer.error = str(event["error"])
        return
    for choice in event.get("choices") or ():
        content = (choice.get("delta") or {}).get("content")
        if content:
            answer.text += content
            answer.num_content_chunks += 1
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]


async def stream_chat(
    client: httpx.AsyncClient,
    base_url: str,
    body: Mapping[str, Any],
    *,
    headers: Mapping[str, str] | None = None,
    first_content: asyncio.Event | None = None,
) -> StreamAnswer:
    """POSTs ``body`` with ``stream: true`` and reads every event; never raises for a broken
    stream (a killed replica): the answer says how far it got. ``first_content`` is set once
    the first content delta arrived (the client is then mid-stream)."""
    answer = StreamAnswer()
    url = base_url + "/v1/chat/completions"
    try:
        async with client.stream(
            "POST", url, json={**body, "stream": True}, headers=dict(headers or {})
        ) as response:
            answer.status = response.status_code
            answer.headers = dict(response.headers)
            answer.replica = response.headers.get(REPLICA_HEADER, "")
            if response.status_code != 200:
                answer.error = (await response.aread()).decode(errors="replace")
                return answer
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    _read_event(answer, line[len("data: ") :].encode())
                    if answer.num_content_chunks and first_content is not None:
                        first_content.set()
    except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
        answer.error = f"{type(exc).__name__}: {exc}"
    return answer


async def stream_many(
    base_url: str, bodies: Sequence[Mapping[str, Any]], *, headers: Mapping[str, str] | None = None
) -> list[StreamAnswer]:
    """All of ``bodies`` at once, one connection each."""
    async with new_client(max_connections=len(bodies) + 1) as client:
        return list(
            await asyncio.gather(
                *(stream_chat(client, base_url, b, headers=headers) for b in bodies)
            )
        )


async def post_many(
    base_url: str,
    bodies: Sequence[Mapping[str, Any]],
    *,
    headers: Mapping[str, str] | None = None,
    concurrency: int = 16,
) -> list[httpx.Response]:
    """Non-stream chat requests, ``concurrency`` at a time, each response read whole."""
    gate = asyncio.Semaphore(concurrency)
    async with new_client(max_connections=concurrency + 1) as client:

        async def one(body: Mapping[str, Any]) -> httpx.Response:
            async with gate:
                return await client.post(
                    base_url + "/v1/chat/completions", json=dict(body), headers=dict(headers or {})
                )

        return list(await asyncio.gather(*(one(b) for b in bodies)))

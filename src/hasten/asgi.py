"""Small pure-ASGI building blocks: reading bodies, sending responses, watching disconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from hasten.errors import InvalidRequest, PayloadTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON_CONTENT_TYPE = (b"content-type", b"application/json")
DISCONNECTED = "client disconnected"
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def header(scope: Scope, name: bytes) -> bytes | None:
    """First value of a request header (names in ASGI are lower-case)."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


async def read_body(receive: Receive, scope: Scope, max_bytes: int) -> bytes:
    """Reads the whole request body, refusing more than ``max_bytes`` as early as possible."""
    declared = header(scope, b"content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise InvalidRequest("invalid Content-Length header") from None
        if declared_bytes > max_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
    message = await receive()
    body: bytes = message.get("body", b"")
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
    if not message.get("more_body", False):
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError(DISCONNECTED)
        return body
    parts = [body]
    num_bytes = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError(DISCONNECTED)
        chunk = message.get("body", b"")
        num_bytes += len(chunk)
        if num_bytes > max_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def accept_lifespan(receive: Receive, send: Send) -> None:
    """Answers an ASGI lifespan for an app with nothing to start or stop (its resources
    belong to whoever built it)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def send_response(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class DisconnectWatcher:
    """Cancels the current task when the client goes away before the response is done.

    uvicorn's ``send`` silently drops writes after a disconnect, so without this a
    forgotten stream would keep the upstream generating for nobody.
    """

    __slots__ = ("_task", "_watch", "is_disconnected", "is_finished")

    def __init__(self, receive: Receive) -> None:
        self.is_disconnected = False
        self.is_finished = False
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._watch = asyncio.get_running_loop().create_task(self._listen(receive))

    async def _listen(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        if not self.is_finished:
            self.is_disconnected = True
            self._task.cancel(DISCONNECTED)

    def finish(self) -> None:
        """Marks the response complete: a disconnect from now on is the normal end."""
        self.is_finished = True
        self._watch.cancel()

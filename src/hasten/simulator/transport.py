"""ASGI I/O for the simulator: reading request bodies, sending responses, noticing disconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from hasten.errors import HastenError, PayloadTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY_BYTES = 64 * 1024 * 1024
JSON_HEADERS = ((b"content-type", b"application/json"),)
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class ClientGone(Exception):
    """The client disconnected (seen while reading the body or when a send failed)."""


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body  # the common case: the whole body in one message
    parts = [body]
    num_bytes = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        num_bytes += len(chunk)
        if num_bytes > MAX_BODY_BYTES:
            raise PayloadTooLarge("request body too large")
        parts.append(chunk)
    return b"".join(parts)


def json_headers(body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> list[Any]:
    return [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *extra]


async def send_json(
    send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    try:
        await send(
            {"type": "http.response.start", "status": status, "headers": json_headers(body, extra)}
        )
        await send({"type": "http.response.body", "body": body})
    except OSError as exc:
        raise ClientGone from exc


def error_headers(error: HastenError) -> tuple[tuple[bytes, bytes], ...]:
    extra = tuple((name.encode(), value.encode()) for name, value in error.headers.items())
    if error.retry_after_s is None:
        return extra
    seconds = f"{error.retry_after_s:g}".encode()
    millis = str(round(error.retry_after_s * 1000)).encode()
    return ((b"retry-after", seconds), (b"retry-after-ms", millis), *extra)


async def send_error(send: Send, error: HastenError) -> None:
    await send_json(send, error.status_code, error.to_json(), error_headers(error))


class DisconnectWatcher:
    """Waits out simulated latency while listening for the client's `http.disconnect`.

    The watching task starts lazily at the first real wait, so zero-latency requests pay
    nothing. Call `close()` when the response is over.
    """

    __slots__ = ("_receive", "_task")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Task[None] | None = None

    @property
    def client_gone(self) -> bool:
        return self._task is not None and self._task.done()

    async def wait(self, delay_s: float) -> bool:
        """Sleeps up to `delay_s`; returns True if the client went away meanwhile."""
        if delay_s <= 0:
            return self.client_gone
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())
        elif self._task.done():
            return True
        await asyncio.wait((self._task,), timeout=delay_s)
        return self._task.done()

    async def _watch(self) -> None:
        # Any failure of receive() means the request is over for us, same as a disconnect.
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass
        except Exception:
            return

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

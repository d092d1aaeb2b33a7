"""The one ASGI toolkit of the gateway, the local engine's server and the simulator.

Reading a body within a limit, sending JSON, rendering a ``HastenError``, streaming SSE, and
the one representation of a client that went away: ``ClientGone`` (``hasten.errors``),
raised by ``read_body``, by the senders here when the server's ``send`` fails, and at the
end of a ``DisconnectWatcher`` block when the client left while it was being answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from types import TracebackType
from typing import Any

from hasten.errors import ClientGone, HastenError, InvalidRequest, PayloadTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON_CONTENT_TYPE = (b"content-type", b"application/json")
SSE_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx and friends: pass each event on at once
)
SSE_DONE = b"data: [DONE]\n\n"
# The message of the cancellation a watcher delivers: how it tells its own from others.
DISCONNECTED = "client disconnected"


def header(scope: Scope, name: bytes) -> bytes | None:
    """First value of a request header (names in ASGI are lower-case)."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


async def read_body(receive: Receive, scope: Scope, max_bytes: int) -> bytes:
    """Reads the whole request body, refusing more than ``max_bytes`` as early as possible
    (a declared Content-Length over it is refused before a byte is read).

    Raises ``PayloadTooLarge``, ``InvalidRequest`` (a Content-Length that is no number) or
    ``ClientGone``. How long a body may take is the connection's business
    (``hasten.server.connection``: 408 after ``body_timeout_s``), not this function's.
    """
    declared = header(scope, b"content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise InvalidRequest("invalid Content-Length header") from None
        if declared_bytes > max_bytes:
            raise _too_large(max_bytes)
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if len(body) > max_bytes:
        raise _too_large(max_bytes)
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
        if num_bytes > max_bytes:
            raise _too_large(max_bytes)
        parts.append(chunk)
    return b"".join(parts)


def _too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds the limit of {max_bytes} bytes")


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


async def _send(send: Send, message: Message) -> None:
    # uvicorn drops writes to a closed connection silently; other servers raise OSError.
    try:
        await send(message)
    except OSError as exc:
        raise ClientGone from exc


async def send_response(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> None:
    """A whole response: ``headers`` as given, then Content-Length."""
    content_length = (b"content-length", str(len(body)).encode())
    # The two messages sent here directly: every answer from the cache goes this way.
    try:
        await send(
            {"type": "http.response.start", "status": status, "headers": [*headers, content_length]}
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
    except OSError as exc:
        raise ClientGone from exc


async def send_json(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A JSON response from its serialised ``body``."""
    await send_response(send, status, body, [JSON_CONTENT_TYPE, *headers])


def error_headers(error: HastenError) -> Headers:
    """What a rendered ``error`` carries besides its content type: Retry-After in whole
    seconds, at least 1 (RFC 9110 allows no fractions), then its own (e.g. a 405's Allow)."""
    headers: Headers = []
    if error.retry_after_s is not None:
        headers.append((b"retry-after", str(max(1, round(error.retry_after_s))).encode()))
    headers.extend((name.encode(), value.encode()) for name, value in error.headers.items())
    return headers


async def send_error(
    send: Send, error: HastenError, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Renders ``error``: its status, ``{"error": {"message", "type", "param", "code"}}``,
    ``headers`` (the caller's own, such as a request id), then ``error_headers``."""
    await send_json(send, error.status_code, error.to_json(), [*headers, *error_headers(error)])


def sse_event(data: bytes) -> bytes:
    """One SSE event carrying ``data`` (a JSON document, or ``[DONE]``)."""
    return b"data: " + data + b"\n\n"


async def start_stream(send: Send, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Starts a response whose body follows in pieces (``send_body``), headers as given."""
    await _send(send, {"type": "http.response.start", "status": status, "headers": [*headers]})


async def start_sse(send: Send, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Starts a 200 event stream: ``SSE_HEADERS``, then ``headers``."""
    await start_stream(send, 200, [*SSE_HEADERS, *headers])


async def send_body(send: Send, body: bytes, *, more_body: bool = True) -> None:
    """A piece of a started response's body; ``more_body=False`` ends it."""
    await _send(send, {"type": "http.response.body", "body": body, "more_body": more_body})


class DisconnectWatcher:
    """Ends the answer to a client that went away, as ``ClientGone``.

    uvicorn's ``send`` silently drops writes after a disconnect, so without this a
    forgotten stream would keep the upstream generating (or the engine decoding) for
    nobody. Used as ``with DisconnectWatcher(receive):`` around the answer: while it is
    armed, an ``http.disconnect`` (or a failing ``receive``) cancels the task serving the
    request, wherever it waits; leaving the block turns that cancellation into
    ``ClientGone`` and takes it back (``uncancel``), so nothing above sees a cancellation
    nobody asked for. A disconnect after the block is the normal end of a response.

    With ``is_armed=False`` it listens only from the first ``arm`` or ``sleep``: the
    simulator answers without waiting at zero latency, and pays for no listening task then.
    """

    __slots__ = ("_receive", "_task", "_watch", "is_disconnected", "is_finished")

    def __init__(self, receive: Receive, *, is_armed: bool = True) -> None:
        self.is_disconnected = False
        self.is_finished = False
        self._task: asyncio.Task[Any] | None = None  # the one it cancels, found when armed
        self._receive = receive
        self._watch: asyncio.Task[None] | None = None
        if is_armed:
            self.arm()

    def arm(self) -> None:
        """Starts listening for the disconnect, if not yet (from the task serving the request)."""
        if self._watch is None and not self.is_finished:
            self._task = asyncio.current_task()
            assert self._task is not None
            self._watch = asyncio.get_running_loop().create_task(self._listen())

    async def sleep(self, delay_s: float) -> None:
        """Waits ``delay_s``, listening meanwhile; a disconnect ends the wait early."""
        self.arm()
        await asyncio.sleep(delay_s)

    async def _listen(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a receive that fails means the request is over for us too
            pass
        if not self.is_finished and self._task is not None:
            self.is_disconnected = True
            self._task.cancel(DISCONNECTED)

    def finish(self) -> None:
        """Marks the response complete: a disconnect from now on is the normal end."""
        self.is_finished = True
        if self._watch is not None:
            self._watch.cancel()

    def __enter__(self) -> DisconnectWatcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.finish()
        if not self.is_disconnected:
            return
        if exc is not None and not (
            isinstance(exc, asyncio.CancelledError) and DISCONNECTED in exc.args
        ):
            return  # another failure (or cancellation) came first: it stands
        assert self._task is not None  # set when armed, and only an armed watcher disconnects
        self._task.uncancel()
        raise ClientGone from None

"""The ASGI toolkit on its own: fake ``receive``/``send`` callables, no server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import orjson
import pytest

from hasten.errors import (
    ClientGone,
    HastenError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
)
from hasten.wire.asgi import (
    JSON_CONTENT_TYPE,
    SSE_DONE,
    SSE_HEADERS,
    DisconnectWatcher,
    Message,
    Receive,
    Scope,
    error_headers,
    read_body,
    send_body,
    send_error,
    send_json,
    sse_event,
    start_sse,
)

DISCONNECT: Message = {"type": "http.disconnect"}


def scope_with(headers: Iterable[tuple[bytes, bytes]] = ()) -> Scope:
    return {"type": "http", "method": "POST", "path": "/", "headers": list(headers)}


def chunks(*parts: bytes) -> Receive:
    """A receive that hands out ``parts`` as one body, then reports a disconnect."""
    messages: list[Message] = [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]

    async def receive() -> Message:
        return messages.pop(0) if messages else DISCONNECT

    return receive


async def never_called() -> Message:
    raise AssertionError("the body was read although its declared length was refused")


class Recorder:
    """A ``send`` that keeps every message."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return list(self.messages[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


# --- reading a body ------------------------------------------------------------------------


async def test_read_body_joins_chunks_up_to_the_limit() -> None:
    assert await read_body(chunks(b"hello"), scope_with(), 5) == b"hello"
    assert await read_body(chunks(b"he", b"", b"llo"), scope_with(), 5) == b"hello"
    assert await read_body(chunks(b""), scope_with(), 0) == b""


@pytest.mark.parametrize("parts", [(b"123456",), (b"123", b"456"), (b"", b"12345", b"6")])
async def test_read_body_refuses_one_byte_over_the_limit(parts: tuple[bytes, ...]) -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        await read_body(chunks(*parts), scope_with(), 5)
    assert caught.value.status_code == 413
    assert caught.value.code == "payload_too_large"
    assert "5 bytes" in caught.value.message


async def test_read_body_refuses_a_declared_length_before_reading() -> None:
    with pytest.raises(PayloadTooLarge):
        await read_body(never_called, scope_with([(b"content-length", b"6")]), 5)
    with pytest.raises(InvalidRequest) as caught:
        await read_body(never_called, scope_with([(b"content-length", b"lots")]), 5)
    assert caught.value.status_code == 400
    assert type(caught.value) is InvalidRequest


@pytest.mark.parametrize("num_parts_before", [0, 1])
async def test_read_body_reports_a_disconnect_as_client_gone(num_parts_before: int) -> None:
    messages: list[Message] = [{"type": "http.request", "body": b"x", "more_body": True}]
    messages = [*messages[:num_parts_before], DISCONNECT]

    async def receive() -> Message:
        return messages.pop(0)

    with pytest.raises(ClientGone):
        await read_body(receive, scope_with(), 100)


# --- JSON and errors -----------------------------------------------------------------------


async def test_send_json_sets_type_then_length() -> None:
    send = Recorder()
    await send_json(send, 201, b'{"a":1}', [(b"x-extra", b"1")])
    assert send.status == 201
    assert send.headers == [JSON_CONTENT_TYPE, (b"x-extra", b"1"), (b"content-length", b"7")]
    assert send.body == b'{"a":1}'
    assert send.messages[-1]["more_body"] is False


@pytest.mark.parametrize(
    ("error", "status", "kind", "code"),
    [
        (HastenError("boom"), 500, "server_error", None),
        (NotFound("nope", code="unknown_url"), 404, "invalid_request_error", "unknown_url"),
        (InvalidRequest("bad", param="model"), 400, "invalid_request_error", None),
        (RateLimited("slow down"), 429, "rate_limit_error", "rate_limit_exceeded"),
    ],
)
async def test_send_error_renders_the_openai_shape_with_its_status(
    error: HastenError, status: int, kind: str, code: str | None
) -> None:
    send = Recorder()
    await send_error(send, error)
    assert send.status == status
    assert orjson.loads(send.body) == {
        "error": {"message": error.message, "type": kind, "param": error.param, "code": code}
    }
    assert send.headers[0] == JSON_CONTENT_TYPE
    assert send.headers[-1] == (b"content-length", str(len(send.body)).encode())


async def test_send_error_puts_caller_headers_before_the_errors_own() -> None:
    send = Recorder()
    error = MethodNotAllowed("use GET", allow="GET, HEAD")
    await send_error(send, error, [(b"x-hasten-request-id", b"r1")])
    assert send.status == 405
    assert send.headers[:3] == [
        JSON_CONTENT_TYPE,
        (b"x-hasten-request-id", b"r1"),
        (b"allow", b"GET, HEAD"),
    ]


@pytest.mark.parametrize(("retry_after_s", "header"), [(0.2, b"1"), (2.6, b"3"), (30.0, b"30")])
def test_retry_after_is_whole_seconds_and_at_least_one(retry_after_s: float, header: bytes) -> None:
    error = RateLimited("slow down", retry_after_s=retry_after_s)
    assert error_headers(error) == [(b"retry-after", header)]
    assert error_headers(RateLimited("slow down")) == []


# --- server-sent events --------------------------------------------------------------------


async def test_sse_response_has_stream_headers_and_data_framing() -> None:
    send = Recorder()
    await start_sse(send, [(b"x-hasten-cache", b"hit")])
    await send_body(send, sse_event(b'{"n":1}'))
    await send_body(send, SSE_DONE, more_body=False)
    assert send.status == 200
    assert send.headers == [*SSE_HEADERS, (b"x-hasten-cache", b"hit")]
    assert dict(SSE_HEADERS) == {
        b"content-type": b"text/event-stream; charset=utf-8",
        b"cache-control": b"no-cache",
        b"x-accel-buffering": b"no",
    }
    assert send.body == b'data: {"n":1}\n\ndata: [DONE]\n\n'
    assert [m["more_body"] for m in send.messages[1:]] == [True, False]


async def test_a_send_that_fails_is_client_gone() -> None:
    async def broken(message: Message) -> None:
        raise ConnectionResetError("peer gone")

    with pytest.raises(ClientGone):
        await send_body(broken, b"data")
    with pytest.raises(ClientGone):
        await send_json(broken, 200, b"{}")


# --- disconnects ---------------------------------------------------------------------------


class Inbox:
    """A receive whose messages the test pushes, counting calls."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.num_calls = 0

    async def __call__(self) -> Message:
        self.num_calls += 1
        return await self.queue.get()


async def test_a_disconnect_interrupts_the_wait_and_ends_as_client_gone() -> None:
    inbox = Inbox()
    task = asyncio.current_task()
    assert task is not None
    reached_end = False
    with pytest.raises(ClientGone):
        with DisconnectWatcher(inbox) as watcher:
            inbox.queue.put_nowait(DISCONNECT)
            await asyncio.sleep(3600)  # any wait: the disconnect ends it
            reached_end = True
    assert not reached_end and watcher.is_disconnected
    assert task.cancelling() == 0  # taken back: later awaits in this task still work
    await asyncio.sleep(0)


async def test_without_a_disconnect_the_block_ends_normally_and_stops_listening() -> None:
    inbox = Inbox()
    with DisconnectWatcher(inbox) as watcher:
        await asyncio.sleep(0)
    inbox.queue.put_nowait(DISCONNECT)  # the normal end of a finished response
    for _ in range(3):
        await asyncio.sleep(0)
    assert watcher.is_finished and not watcher.is_disconnected
    assert inbox.queue.qsize() == 1  # nobody read it


async def test_an_unarmed_watcher_listens_from_its_first_sleep() -> None:
    inbox = Inbox()
    with pytest.raises(ClientGone):
        with DisconnectWatcher(inbox, is_armed=False) as watcher:
            await asyncio.sleep(0)
            assert inbox.num_calls == 0  # a zero-latency answer costs no listening
            inbox.queue.put_nowait(DISCONNECT)
            await watcher.sleep(3600)


async def test_a_failing_receive_counts_as_a_disconnect() -> None:
    async def receive() -> Message:
        raise RuntimeError("transport closed")

    with pytest.raises(ClientGone):
        with DisconnectWatcher(receive):
            await asyncio.sleep(3600)


async def test_other_failures_and_cancellations_pass_through() -> None:
    inbox = Inbox()
    with pytest.raises(ValueError), DisconnectWatcher(inbox):
        raise ValueError("not a disconnect")

    async def serve() -> None:
        with DisconnectWatcher(inbox):
            await asyncio.sleep(3600)

    task = asyncio.get_running_loop().create_task(serve())
    await asyncio.sleep(0)
    task.cancel()  # a shutdown, not the client: stays a cancellation
    with pytest.raises(asyncio.CancelledError):
        await task

"""Carrying out a planned response over ASGI: waiting out latency, streaming, injecting faults.

Delays are measured from the request's arrival (`start_s`, loop time), so our own processing
time is absorbed instead of added. Events due at the same moment are coalesced into one send,
which keeps zero-latency responses to a couple of writes. A client that goes away while we
wait cuts the wait short (`DisconnectWatcher.sleep`): the watcher's block ends in
`ClientGone`, counted as CANCELLED (STALLED when the wait was an injected silence).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hasten.errors import ClientGone, HastenError
from hasten.simulator.faults import Fault, FaultKind
from hasten.simulator.payloads import error_event
from hasten.simulator.stats import Outcome
from hasten.simulator.streaming import ScheduledEvent
from hasten.wire.asgi import (
    JSON_CONTENT_TYPE,
    SSE_DONE,
    DisconnectWatcher,
    Receive,
    Send,
    send_body,
    send_json,
    start_sse,
    start_stream,
)

SIMULATED_500_MESSAGE = "The server had an error while processing your request."
# "Never answers": until the client gives up, or this long (nothing waits for ever).
MAX_STALL_S = 3600.0
# What a broken proxy in between might emit: an event whose JSON stops midway.
MALFORMED_EVENT = b'data: {"object": "chat.completion.chunk", "choices": [{"delta": {"con\n\n'
MALFORMED_BODY_INSERT = b"\x00<garbage>"
WHOLE_BODY_FAULTS = frozenset({FaultKind.DISCONNECT, FaultKind.MALFORMED, FaultKind.TRUNCATE})


@dataclass(frozen=True, slots=True)
class StreamWire:
    """What differs between the APIs' streams: the marker a whole stream ends with (chat's
    ``[DONE]``; nothing for the typed Responses and Messages streams, whose last event says
    it), the event a malformed fault inserts, and the mid-stream error event, given how
    many events went out before it."""

    done: bytes
    malformed_event: bytes
    error_event: Callable[[int], bytes]


def _chat_error_event(num_events_sent: int) -> bytes:
    return error_event(HastenError(SIMULATED_500_MESSAGE))


CHAT_WIRE = StreamWire(SSE_DONE, MALFORMED_EVENT, _chat_error_event)


async def wait_until_due(watcher: DisconnectWatcher, start_s: float, due_ms: float) -> None:
    """Sleeps until `due_ms` after `start_s` (not at all if that has passed)."""
    if due_ms <= 0:
        return
    delay_s = start_s + due_ms / 1000.0 - asyncio.get_running_loop().time()
    if delay_s > 0:
        await watcher.sleep(delay_s)


async def send_whole(
    send: Send,
    watcher: DisconnectWatcher,
    start_s: float,
    due_ms: float,
    body: bytes,
    *,
    cut_midway: bool = False,
) -> None:
    """Sends a complete 200 JSON response when due.

    With `cut_midway` it sends the full Content-Length but only half the body and returns
    without finishing, which makes the server drop the connection (an injected disconnect).
    """
    await wait_until_due(watcher, start_s, due_ms)
    if not cut_midway:
        await send_json(send, 200, body)
        return
    content_length = (b"content-length", str(len(body)).encode())
    await start_stream(send, 200, [JSON_CONTENT_TYPE, content_length])
    await send_body(send, body[: len(body) // 2])


async def send_faulty_whole(
    send: Send,
    watcher: DisconnectWatcher,
    start_s: float,
    due_ms: float,
    body: bytes,
    kind: FaultKind,
) -> Outcome:
    """A whole 200 body with a fault of ``WHOLE_BODY_FAULTS``: cut off with the connection
    (DISCONNECT), complete by HTTP but cut mid-JSON (TRUNCATE), or not JSON (MALFORMED)."""
    if kind is FaultKind.DISCONNECT:
        await send_whole(send, watcher, start_s, due_ms, body, cut_midway=True)
        return Outcome.DISCONNECTED
    half = len(body) // 2
    if kind is FaultKind.TRUNCATE:
        await send_whole(send, watcher, start_s, due_ms, body[:half])
    else:
        await send_whole(send, watcher, start_s, due_ms, body[:half] + MALFORMED_BODY_INSERT)
    return Outcome.CORRUPTED


async def stall(
    send: Send, receive: Receive, start_s: float, fault: Fault, is_stream: bool
) -> Outcome:
    """Answers nothing (SILENT), or a 200 and its headers and then nothing (HANG), until
    the client goes away (or ``MAX_STALL_S``)."""
    try:
        with DisconnectWatcher(receive) as watcher:
            if fault.kind is FaultKind.HANG:
                if is_stream:
                    await start_sse(send)
                else:
                    await start_stream(send, 200, [JSON_CONTENT_TYPE])
            await watcher.sleep(MAX_STALL_S)
    except ClientGone:
        pass
    return Outcome.STALLED


class StreamRun:
    """One SSE response in progress; `run` returns the outcome and counts the tokens sent."""

    def __init__(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        wire: StreamWire = CHAT_WIRE,
    ) -> None:
        self._send = send
        self._watcher = watcher
        self._start_s = start_s
        self._wire = wire
        self._started = False
        self._buffer: list[bytes] = []
        self.num_tokens_sent = 0
        self.num_events_sent = 0

    async def _flush(self, *, more_body: bool) -> None:
        if not self._started:
            self._started = True
            await start_sse(self._send)
        body = b"".join(self._buffer)
        self._buffer.clear()
        await send_body(self._send, body, more_body=more_body)

    async def run(self, events: Iterable[ScheduledEvent], fault: Fault) -> Outcome:
        limit = fault.after_chunks if fault.kind is not FaultKind.NONE else None
        if fault.kind is FaultKind.MALFORMED:
            return await self._run_malformed(events, limit or 0)
        buffer = self._buffer
        next_event = self._wire.done  # the event a truncation cuts in half
        for num_events, (due_ms, data, num_tokens) in enumerate(events):
            if limit is not None and num_events >= limit:
                next_event = data
                break
            if due_ms > 0:  # checked here too: a zero-latency stream never leaves the loop
                await self._wait_due(due_ms)
            buffer.append(data)
            self.num_tokens_sent += num_tokens
            self.num_events_sent += 1
        else:
            if limit is None:
                return await self._finish(self._wire.done, Outcome.COMPLETED)
            if not next_event and buffer:
                # A typed stream has no end marker to strike at: its last event (still
                # buffered, since nothing waits after it) is the one struck.
                next_event = buffer.pop()
                self.num_events_sent -= 1
        return await self._strike(fault, next_event)

    async def _run_malformed(self, events: Iterable[ScheduledEvent], limit: int) -> Outcome:
        """The whole stream, with one event that is not JSON before event number ``limit``
        (or before ``[DONE]``, when the stream has fewer)."""
        is_inserted = False
        for num_events, (due_ms, data, num_tokens) in enumerate(events):
            await self._wait_due(due_ms)
            if num_events == limit:
                self._buffer.append(self._wire.malformed_event)
                is_inserted = True
            self._buffer.append(data)
            self.num_tokens_sent += num_tokens
            self.num_events_sent += 1
        if not is_inserted:
            self._buffer.append(self._wire.malformed_event)
        return await self._finish(self._wire.done, Outcome.CORRUPTED)

    async def _wait_due(self, due_ms: float) -> None:
        if due_ms <= 0:
            return
        delay_s = self._start_s + due_ms / 1000.0 - asyncio.get_running_loop().time()
        if delay_s > 0:
            if self._buffer:
                await self._flush(more_body=True)
            await self._watcher.sleep(delay_s)

    async def _finish(self, last_event: bytes, outcome: Outcome) -> Outcome:
        self._buffer.append(last_event)
        await self._flush(more_body=False)
        return outcome

    async def _strike(self, fault: Fault, next_event: bytes) -> Outcome:
        if fault.kind is FaultKind.SERVER_ERROR:
            error = self._wire.error_event(self.num_events_sent)
            return await self._finish(error, Outcome.SERVER_ERROR)
        if fault.kind is FaultKind.TRUNCATE:
            # A clean end of the body (no abort) halfway through an event, without [DONE]
            # (a typed stream's last event cut instead when the fault strikes past it).
            return await self._finish(next_event[: len(next_event) // 2], Outcome.CORRUPTED)
        # DISCONNECT: push what is buffered, then return with the body unfinished so the
        # server closes the connection without `[DONE]` or a final chunk.
        await self._flush(more_body=True)
        return Outcome.DISCONNECTED

"""Carrying out a planned response over ASGI: waiting out latency, streaming, injecting faults.

Delays are measured from the request's arrival (`start_s`, loop time), so our own processing
time is absorbed instead of added. Events due at the same moment are coalesced into one send,
which keeps zero-latency responses to a couple of writes. A client that goes away while we
wait cuts the wait short (`DisconnectWatcher.sleep`): the watcher's block ends in
`ClientGone`, counted as CANCELLED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from hasten.asgi import (
    JSON_CONTENT_TYPE,
    SSE_DONE,
    DisconnectWatcher,
    Send,
    send_body,
    send_json,
    start_sse,
    start_stream,
)
from hasten.errors import HastenError
from hasten.simulator.faults import Fault, FaultKind
from hasten.simulator.payloads import error_event
from hasten.simulator.stats import Outcome
from hasten.simulator.streaming import ScheduledEvent

SIMULATED_500_MESSAGE = "The server had an error while processing your request."


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


class StreamRun:
    """One SSE response in progress; `run` returns the outcome and counts the tokens sent."""

    def __init__(self, send: Send, watcher: DisconnectWatcher, start_s: float) -> None:
        self._send = send
        self._watcher = watcher
        self._start_s = start_s
        self._started = False
        self._buffer: list[bytes] = []
        self.num_tokens_sent = 0

    async def _flush(self, *, more_body: bool) -> None:
        if not self._started:
            self._started = True
            await start_sse(self._send)
        body = b"".join(self._buffer)
        self._buffer.clear()
        await send_body(self._send, body, more_body=more_body)

    async def run(self, events: Iterable[ScheduledEvent], fault: Fault) -> Outcome:
        limit = fault.after_chunks if fault.kind is not FaultKind.NONE else None
        buffer = self._buffer
        for num_events, (due_ms, data, num_tokens) in enumerate(events):
            if limit is not None and num_events >= limit:
                break
            if due_ms > 0:
                delay_s = self._start_s + due_ms / 1000.0 - asyncio.get_running_loop().time()
                if delay_s > 0:
                    if buffer:
                        await self._flush(more_body=True)
                    await self._watcher.sleep(delay_s)
            buffer.append(data)
            self.num_tokens_sent += num_tokens
        else:
            if limit is None:
                return await self._finish(SSE_DONE, Outcome.COMPLETED)
        return await self._strike(fault)

    async def _finish(self, last_event: bytes, outcome: Outcome) -> Outcome:
        self._buffer.append(last_event)
        await self._flush(more_body=False)
        return outcome

    async def _strike(self, fault: Fault) -> Outcome:
        if fault.kind is FaultKind.SERVER_ERROR:
            error = HastenError(SIMULATED_500_MESSAGE)
            return await self._finish(error_event(error), Outcome.SERVER_ERROR)
        # DISCONNECT: push what is buffered, then return with the body unfinished so the
        # server closes the connection without `[DONE]` or a final chunk.
        await self._flush(more_body=True)
        return Outcome.DISCONNECTED

"""Carrying out a planned response over ASGI: waiting out latency, streaming, injecting faults.

Delays are measured from the request's arrival (`start_s`, loop time), so our own processing
time is absorbed instead of added. Events due at the same moment are coalesced into one send,
which keeps zero-latency responses to a couple of writes. A client that goes away while we
wait is noticed through `DisconnectWatcher` and reported as CANCELLED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from hasten.errors import HastenError
from hasten.simulator.faults import Fault, FaultKind
from hasten.simulator.payloads import DONE_EVENT, error_event
from hasten.simulator.stats import Outcome
from hasten.simulator.streaming import ScheduledEvent
from hasten.simulator.transport import (
    SSE_HEADERS,
    ClientGone,
    DisconnectWatcher,
    Send,
    json_headers,
)


@dataclass(frozen=True, slots=True)
class WholeResponse:
    status: int
    body: bytes
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()


async def wait_until_due(watcher: DisconnectWatcher, start_s: float, due_ms: float) -> bool:
    """Sleeps until `due_ms` after `start_s`; True if the client went away first."""
    if due_ms <= 0:
        return watcher.client_gone
    delay_s = start_s + due_ms / 1000.0 - asyncio.get_running_loop().time()
    return await watcher.wait(delay_s)


async def send_whole(
    send: Send,
    watcher: DisconnectWatcher,
    start_s: float,
    due_ms: float,
    response: WholeResponse,
    *,
    cut_midway: bool = False,
) -> bool:
    """Sends a complete JSON response when due; False if the client went away first.

    With `cut_midway` it sends the full Content-Length but only half the body and returns
    without finishing, which makes the server drop the connection (an injected disconnect).
    """
    if await wait_until_due(watcher, start_s, due_ms):
        return False
    body = response.body
    start = {
        "type": "http.response.start",
        "status": response.status,
        "headers": json_headers(body, response.extra_headers),
    }
    try:
        await send(start)
        if cut_midway:
            await send(
                {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
            )
        else:
            await send({"type": "http.response.body", "body": body})
    except OSError as exc:
        raise ClientGone from exc
    return True


class StreamRun:
    """One SSE response in progress; `run` returns the outcome and the tokens sent."""

    def __init__(self, send: Send, watcher: DisconnectWatcher, start_s: float) -> None:
        self._send = send
        self._watcher = watcher
        self._start_s = start_s
        self._started = False
        self._buffer: list[bytes] = []
        self.num_tokens_sent = 0

    async def _flush(self, *, more_body: bool) -> None:
        try:
            if not self._started:
                self._started = True
                await self._send(
                    {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                )
            body = b"".join(self._buffer)
            self._buffer.clear()
            await self._send({"type": "http.response.body", "body": body, "more_body": more_body})
        except OSError as exc:
            raise ClientGone from exc

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
                    if await self._watcher.wait(delay_s):
                        return Outcome.CANCELLED
            buffer.append(data)
            self.num_tokens_sent += num_tokens
        else:
            if limit is None:
                return await self._finish(DONE_EVENT, Outcome.COMPLETED)
        return await self._strike(fault)

    async def _finish(self, last_event: bytes, outcome: Outcome) -> Outcome:
        if self._watcher.client_gone:
            return Outcome.CANCELLED
        self._buffer.append(last_event)
        await self._flush(more_body=False)
        return outcome

    async def _strike(self, fault: Fault) -> Outcome:
        if fault.kind is FaultKind.SERVER_ERROR:
            error = HastenError("The server had an error while processing your request.")
            return await self._finish(error_event(error), Outcome.SERVER_ERROR)
        # DISCONNECT: push what is buffered, then return with the body unfinished so the
        # server closes the connection without `[DONE]` or a final chunk.
        await self._flush(more_body=True)
        return Outcome.DISCONNECTED

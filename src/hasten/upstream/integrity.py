"""Checking an upstream answer before it is forwarded: whole SSE events that are JSON, and
whole JSON bodies.

The gateway forwards upstream bytes as they come, but a client reads events: one broken
event breaks its parser (the OpenAI SDKs raise on data that is not JSON), and a client
cannot tell a body cut mid-JSON from a bad answer. So a stream chunk is forwarded up to its
last complete event (the rest waits for the next chunk; upstreams send whole events, so
usually nothing waits), each event's data must parse as JSON or be ``[DONE]``, and a stream
that ends halfway through an event is an error. The proxy turns that error into a clean SSE
error event and caches nothing, as for a connection cut mid-answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from hasten.errors import UpstreamError
from hasten.wire.sse import DONE, EVENT_END, SSEDecoder, event_data, last_event_end

MALFORMED_CODE = "upstream_malformed"
# What an upstream can make the gateway hold before it has a whole event to check: one
# event (a token's delta, a tool call, the usage) is a few KiB; a stream that never ends an
# event would otherwise grow the held bytes without bound.
MAX_EVENT_BYTES = 16 * 1024 * 1024


def _content_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type") or headers.get("Content-Type") or ""


def is_event_stream(headers: Mapping[str, str]) -> bool:
    return "event-stream" in _content_type(headers)


def malformed(what: str) -> UpstreamError:
    return UpstreamError(f"upstream sent {what}", code=MALFORMED_CODE)


def check_json_body(body: bytes) -> UpstreamError | None:
    """None when ``body`` parses as JSON, else the error to fail the attempt with."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return malformed(f"a body that is not JSON ({len(body)} bytes)")
    return None


class EventSink(Protocol):
    """Takes the events a ``StreamGuard`` parsed anyway, so no one parses them twice."""

    def event(self, payload: bytes, parsed: Any) -> None:
        """A data event other than ``[DONE]``: its payload and the JSON it parsed to."""

    def done(self) -> None:
        """A ``[DONE]`` event."""

    def end(self, tail: bytes) -> None:
        """The stream ended; ``tail`` is what followed its last whole event."""


class StreamGuard:
    """Feeds raw stream bytes, returns the whole events among them (raw, as they came), up
    to the first ``[DONE]``: what follows it is the end of no answer, so it is neither
    forwarded nor checked (``is_over``; ``has_extra`` once anything but blank lines came
    after it, so the reader may stop reading).

    With a ``sink``, every data event it checked is handed over, in order, with its JSON.
    """

    __slots__ = ("_decoder", "_sink", "_tail", "has_extra", "is_over", "num_events")

    def __init__(self, sink: EventSink | None = None) -> None:
        self._decoder = SSEDecoder()
        self._tail = b""
        self._sink = sink
        self.num_events = 0  # data events checked so far
        self.is_over = False  # a [DONE] passed
        self.has_extra = False  # and something other than blank lines after it

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of what came so far; raises UpstreamError on a bad one."""
        if self.is_over:
            self.has_extra = self.has_extra or bool(chunk.strip())
            return b""
        data = self._tail + chunk if self._tail else chunk
        if data.endswith(b"\n\n"):  # the common case: upstreams send whole events
            self._tail = b""
        else:
            end = last_event_end(data)
            data, self._tail = data[:end], data[end:]
            if len(self._tail) > MAX_EVENT_BYTES:
                raise malformed(f"an event of over {MAX_EVENT_BYTES} bytes")
            if not data:
                return data
        if b"\r" in data:  # CR line ends: the decoder knows them
            if b"[DONE]" in data and (done_at := done_end(data)) is not None:
                data = self._over(data, done_at)
            if b"\r" in data:  # (else only what followed the [DONE] had them)
                self._check_all(self._decoder.feed(data))
                return data
        # One walk over the events checks each and finds the first ``[DONE]``: the stream's
        # end, after which nothing is an event of this answer.
        events = data.split(b"\n\n")
        for event in events:
            # One-line ``data:`` events, bare or after an ``event:`` line, are checked here
            # (the decoder's own fast path, with or without the optional space); multi-line
            # data and comments go through the decoder.
            if event.startswith(b"data: ") and b"\n" not in event:
                payload = event[6:]
            elif event.startswith(b"data:") and b"\n" not in event:
                payload = event[5:]
            elif (
                event.startswith(b"event:")
                and (line := event.find(b"\n") + 1)
                and event.startswith(b"data:", line)
                and event.find(b"\n", line) < 0
            ):
                # A named event, one line of data (every Responses and Messages event).
                payload = event[line + 6 if event.startswith(b"data: ", line) else line + 5 :]
            elif event:
                self._check_all(self._decoder.feed(event + b"\n\n"))
                if event_data(event) == DONE:
                    return self._over(data, _end_of(events, event))
                continue
            else:
                continue
            if self._check(payload):
                return self._over(data, _end_of(events, event))
        return data

    def _over(self, data: bytes, done_at: int) -> bytes:
        """``data`` up to its first ``[DONE]`` event, which ends at ``done_at``; what follows
        is noted (``has_extra``) and dropped, never forwarded or checked."""
        self.is_over = True
        self.has_extra = self.has_extra or bool(data[done_at:].strip() or self._tail.strip())
        self._tail = b""
        return data[:done_at]

    def _check_all(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self._check(payload)

    def _check(self, payload: bytes) -> bool:
        """One event's data: JSON (or ``[DONE]``: True), handed to the sink when there is one."""
        self.num_events += 1
        sink = self._sink
        if payload == DONE:
            if sink is not None:
                sink.done()
            return True
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise malformed(f"an event that is not JSON: {payload[:40]!r}") from None
        if sink is not None:
            sink.event(payload, parsed)
        return False

    def finish(self) -> bytes:
        """What is left at the end of the stream, as it came: comments, or a last event
        whose blank line is missing (``data: [DONE]\n``); raises when it is an event cut
        off midway. Nothing after a ``[DONE]``."""
        tail, self._tail = self._tail, b""
        if self.is_over:
            if self._sink is not None:
                self._sink.end(b"")
            return b""
        if not all(p == DONE or _is_json(p) for p in SSEDecoder().feed(tail + b"\n\n")):
            raise malformed("a stream that ends halfway through an event")
        if self._sink is not None:
            self._sink.end(tail)
        return tail


def _end_of(events: list[bytes], event: bytes) -> int:
    """Where ``event``, the first of ``events`` (split at blank lines) with its bytes, ends."""
    i = events.index(event)
    return sum(map(len, events[: i + 1])) + 2 * (i + 1)


def done_end(data: bytes) -> int | None:
    """Where the first ``[DONE]`` event of ``data`` (whole events) ends; None if it has none."""
    if b"\r" not in data:
        start = 0
        while (end := data.find(b"\n\n", start)) >= 0:
            if event_data(data[start:end]) == DONE:
                return end + 2
            start = end + 2
        return None
    start = 0
    for match in EVENT_END.finditer(data):
        event = data[start : match.start()].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if event_data(event) == DONE:
            return match.end()
        start = match.end()
    return None


def _is_json(payload: bytes) -> bool:
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return True

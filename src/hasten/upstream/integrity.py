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

import re
from collections.abc import Mapping

import orjson

from hasten.errors import UpstreamError
from hasten.proxy.sse import DONE, SSEDecoder

MALFORMED_CODE = "upstream_malformed"
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")


def _content_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type") or headers.get("Content-Type") or ""


def is_event_stream(headers: Mapping[str, str]) -> bool:
    return "event-stream" in _content_type(headers)


def is_json_content(headers: Mapping[str, str]) -> bool:
    return "json" in _content_type(headers)


def malformed(what: str) -> UpstreamError:
    return UpstreamError(f"upstream sent {what}", code=MALFORMED_CODE)


def check_json_body(body: bytes) -> UpstreamError | None:
    """None when ``body`` parses as JSON, else the error to fail the attempt with."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return malformed(f"a body that is not JSON ({len(body)} bytes)")
    return None


class StreamGuard:
    """Feeds raw stream bytes, returns the whole events among them (raw, as they came)."""

    __slots__ = ("_decoder", "_tail")

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of what came so far; raises UpstreamError on a bad one."""
        data = self._tail + chunk if self._tail else chunk
        end = _last_event_end(data)
        if end < len(data):
            self._tail = data[end:]
            data = data[:end]
        else:
            self._tail = b""
        if data:
            for payload in self._payloads(data):
                if payload != DONE and not _is_json(payload):
                    raise malformed(f"an event that is not JSON: {payload[:40]!r}")
        return data

    def _payloads(self, data: bytes) -> list[bytes]:
        """The data of the whole events in ``data``: split here on the common ``\n\n``
        ends, one-line ``data: `` events taken as they are (the decoder's fast path); the
        decoder for anything else (CR line ends, multi-line data)."""
        if b"\r" in data:
            return self._decoder.feed(data)
        payloads = []
        for event in data.split(b"\n\n"):
            if event.startswith(b"data: ") and b"\n" not in event:
                payloads.append(event[6:])
            elif event:
                payloads.extend(self._decoder.feed(event + b"\n\n"))
        return payloads

    def finish(self) -> bytes:
        """What is left at the end of the stream, as it came: comments, or a last event
        whose blank line is missing (``data: [DONE]\n``); raises when it is an event cut
        off midway."""
        tail, self._tail = self._tail, b""
        for payload in SSEDecoder().feed(tail + b"\n\n"):
            if payload != DONE and not _is_json(payload):
                raise malformed("a stream that ends halfway through an event")
        return tail


def _is_json(payload: bytes) -> bool:
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return True


def _last_event_end(data: bytes) -> int:
    """Where the last complete event of ``data`` ends (0: none is complete)."""
    if data.endswith(b"\n\n"):
        return len(data)  # the common case: upstreams send whole events
    if b"\r" not in data:
        index = data.rfind(b"\n\n")
        return 0 if index < 0 else index + 2
    end = 0
    for match in _EVENT_END.finditer(data):
        end = match.end()
    return end

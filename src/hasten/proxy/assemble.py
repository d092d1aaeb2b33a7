"""Every request streamed upstream: a non-stream client's answer assembled from a stream.

A client that does not stream still gets its request asked of the upstream as a stream
(``stream: true`` with ``stream_options.include_usage``), so the dispatch sees its first
token: TTFT timeouts, TTFT failover and hedging work for it as for a stream, and a stream
client and a non-stream client of the same request share one flight and one cache entry.
When the stream has ended with ``[DONE]``, its chunks are merged into the JSON body the
upstream would have returned (``hasten.cache.replay.chunks_to_body``); ``Assembly`` does
the same merge as the events arrive, from the JSON the stream's guard parsed to check them
(``hasten.upstream.integrity.EventSink``), so no event is decoded or parsed twice. The client never
sees a partial body: a stream that breaks off or carries an error event becomes one
OpenAI-shaped error. Upstreams with ``stream_upstream = false`` (or without
``stream_options``, whose assembled body would lack usage) are asked as the client asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from hasten.cache.replay import BodyMerge, chunks_to_body
from hasten.errors import UpstreamError
from hasten.proxy.ending import StreamEnd
from hasten.proxy.validation import Endpoint
from hasten.routing.models import ResolvedModel
from hasten.wire.sse import DONE, SSEDecoder

STREAM_ERROR_CODE = "upstream_stream_error"
_INCLUDE_USAGE = {"include_usage": True}


def is_assembled(endpoint: Endpoint, is_stream: bool, model: ResolvedModel) -> bool:
    """Whether this request goes upstream as a stream its client will get as one body."""
    return not is_stream and endpoint.is_streamable and model.route.is_stream_upstream


def as_stream_request(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a fresh copy the caller owns) turned into the stream request asked upstream."""
    body["stream"] = True
    options = body.get("stream_options")
    body["stream_options"] = (
        {**options, **_INCLUDE_USAGE} if isinstance(options, dict) else dict(_INCLUDE_USAGE)
    )
    return body


def assemble(stream: bytes | Iterable[bytes], endpoint: str) -> bytes:
    """The JSON body a whole upstream stream stands for; ``stream`` is its raw SSE bytes.

    Raises ``UpstreamError`` (502) for a stream that did not end properly
    (``hasten.proxy.ending``: ``[DONE]``, a finish_reason for every choice; what follows
    the first ``[DONE]`` is not read), carried an error event (its message and code are the
    upstream's) or is not OpenAI-shaped.
    """
    decoder = SSEDecoder()
    payloads: list[bytes] = []
    for data in (stream,) if isinstance(stream, bytes) else stream:
        payloads.extend(decoder.feed(data))
    has_pending = decoder.has_pending
    if DONE in payloads:  # nothing after the first [DONE] is of this answer
        del payloads[payloads.index(DONE) + 1 :]
        has_pending = False
    for payload in payloads:
        if b'"error"' in payload and (error := stream_error(payload)) is not None:
            raise error  # its own words first: an error event ends the stream
    if has_pending or not payloads or payloads[-1] != DONE:
        raise _incomplete()
    del payloads[-1]
    try:
        body = chunks_to_body(payloads, endpoint)
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise _shape_error() from exc
    end = StreamEnd(endpoint)
    for payload in payloads:
        end.event(orjson.loads(payload))
    if not end.is_finished:
        raise _incomplete()  # a choice without its finish_reason: cut short
    return body


def _incomplete() -> UpstreamError:
    return UpstreamError("upstream stream ended before it was complete", code=STREAM_ERROR_CODE)


def _shape_error() -> UpstreamError:
    return UpstreamError(
        "upstream stream is not an OpenAI completion stream", code=STREAM_ERROR_CODE
    )


class Assembly:
    """``assemble`` as the events arrive: an ``EventSink`` for the stream's guard.

    ``body`` gives what ``assemble`` gives for the same stream, and refuses it the same way,
    in the same order: an error event first, then a stream that did not end with
    ``[DONE]``, then one that is not OpenAI-shaped (a ``[DONE]`` that was not last is one).
    """

    __slots__ = (
        "_body",
        "_end",
        "_error",
        "_has_pending",
        "_is_done",
        "_is_misshapen",
        "_merge",
        "_num_events",
    )

    def __init__(self, endpoint: str) -> None:
        self._merge = BodyMerge(endpoint)
        self._end = StreamEnd(endpoint)
        self._error: UpstreamError | None = None
        self._num_events = 0
        self._is_done = False  # the last event so far was [DONE]
        self._is_misshapen = False
        self._has_pending = False
        self._body: bytes | None = None  # built once, for every waiter of a flight

    def event(self, payload: bytes, parsed: Any) -> None:
        self._num_events += 1
        self._end.event(parsed)
        if self._is_done:  # a [DONE] before this event is not JSON to merge
            self._is_done, self._is_misshapen = False, True
        if self._error is None and b'"error"' in payload:
            self._error = event_error(parsed)
        if not self._is_misshapen:
            try:
                self._merge.add(parsed)
            except ValueError:
                self._is_misshapen = True

    def done(self) -> None:
        self._num_events += 1
        if self._is_done:
            self._is_misshapen = True
        self._is_done = True

    def end(self, tail: bytes) -> None:
        self._has_pending = bool(tail.strip())

    def is_whole(self) -> bool:
        """Whether ``body`` gives a body (the stream may be stored for later clients)."""
        try:
            self.body()
        except UpstreamError:
            return False
        return True

    def body(self) -> bytes:
        """The assembled JSON body; raises ``UpstreamError`` (502) as ``assemble`` does."""
        if self._error is not None:
            raise self._error
        if self._has_pending or not self._num_events or not self._is_done:
            raise _incomplete()
        if self._is_misshapen:
            raise _shape_error()
        if self._body is None:
            try:
                body = self._merge.body()
            except ValueError as exc:
                raise _shape_error() from exc
            if not self._end.is_finished:
                raise _incomplete()  # a choice without its finish_reason: cut short
            self._body = body
        return self._body


def stream_error(payload: bytes) -> UpstreamError | None:
    """The error an upstream's ``{"error": ...}`` event stands for; None for any other event."""
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None  # chunks_to_body refuses it with the shape error
    return event_error(event)


def event_error(event: Any) -> UpstreamError | None:
    """``stream_error`` of an event already parsed."""
    error = event.get("error") if isinstance(event, dict) else None
    if error is None:
        return None
    message, code = str(error), STREAM_ERROR_CODE
    if isinstance(error, Mapping):
        message = str(error.get("message") or "upstream error")
        if isinstance(error.get("code"), str) and error["code"]:
            code = error["code"]
    return UpstreamError(f"upstream error mid-stream: {message}", code=code)

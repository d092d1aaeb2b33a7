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

from collections.abc import Iterable
from typing import Any

import orjson

from hasten.apis.api import Api
from hasten.errors import UpstreamError
from hasten.routing.models import ResolvedModel
from hasten.wire.sse import DONE, SSEDecoder

STREAM_ERROR_CODE = "upstream_stream_error"


def is_assembled(api: Api, is_stream: bool, model: ResolvedModel) -> bool:
    """Whether this request goes upstream as a stream its client will get as one body."""
    return not is_stream and api.is_streamable and model.route.is_stream_upstream


def assemble(stream: bytes | Iterable[bytes], api: Api) -> bytes:
    """The JSON body a whole upstream stream stands for; ``stream`` is its raw SSE bytes.

    Raises ``UpstreamError`` (502) as ``Assembly.body`` does for the same events: for a
    stream that carried an error event (its message and code are the upstream's), did not
    end properly (the API's ``Ending``: for chat ``[DONE]`` after a finish_reason for every
    choice, nothing after it read) or has not the API's shape.
    """
    decoder = SSEDecoder()
    assembly = Assembly(api)
    for data in (stream,) if isinstance(stream, bytes) else stream:
        for payload in decoder.feed(data):
            if payload == DONE:
                assembly.done()
                continue
            try:
                parsed: Any = orjson.loads(payload)
            except orjson.JSONDecodeError:
                parsed = None  # not JSON: not the API's shape
            assembly.event(payload, parsed)
    assembly.end(b"x" if decoder.has_pending else b"")
    return assembly.body()


def _incomplete() -> UpstreamError:
    return UpstreamError("upstream stream ended before it was complete", code=STREAM_ERROR_CODE)


def _shape_error(api: Api) -> UpstreamError:
    shape = "an OpenAI completion" if api.has_done else f"a {api.name} API"
    return UpstreamError(f"upstream stream is not {shape} stream", code=STREAM_ERROR_CODE)


class Assembly:
    """``assemble`` as the events arrive: an ``EventSink`` for the stream's guard.

    ``body`` refuses, in this order: an error event first (in its own words), then a stream
    that did not end properly, then one without the API's shape. What comes after a chat
    stream's first ``[DONE]`` is not merged.
    """

    __slots__ = (
        "_api",
        "_body",
        "_end",
        "_error",
        "_has_pending",
        "_is_after_done",
        "_is_misshapen",
        "_merge",
        "_num_events",
    )

    def __init__(self, api: Api) -> None:
        self._api = api
        self._merge = api.merge()
        self._end = api.ending()
        self._error: UpstreamError | None = None
        self._num_events = 0
        self._is_after_done = False
        self._is_misshapen = False
        self._has_pending = False
        self._body: bytes | None = None  # built once, for every waiter of a flight

    def event(self, payload: bytes, parsed: Any) -> None:
        if self._is_after_done:
            return  # not of this answer
        self._num_events += 1
        end = self._end
        end.event(parsed)
        if self._error is None and end.is_broken:  # (an error event always breaks it)
            self._error = self._api.event_error(parsed)
        if not self._is_misshapen:
            try:
                self._merge.add(parsed)
            except (ValueError, AttributeError, TypeError, KeyError):
                self._is_misshapen = True

    def done(self) -> None:
        if self._is_after_done:
            return
        self._num_events += 1
        self._end.done()
        self._is_after_done = self._api.has_done

    def end(self, tail: bytes) -> None:
        self._has_pending = bool(tail.strip()) and not self._is_after_done

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
        end = self._end
        if not self._num_events or self._has_pending or not end.is_ended:
            raise _incomplete()
        if self._is_misshapen:
            raise _shape_error(self._api)
        if self._body is None:
            try:
                body = self._merge.body()
            except (ValueError, AttributeError, TypeError, KeyError) as exc:
                raise _shape_error(self._api) from exc
            if not end.is_finished:
                raise _incomplete()  # a choice without its finish_reason: cut short
            self._body = body
        return self._body

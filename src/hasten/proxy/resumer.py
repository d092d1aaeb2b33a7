"""Streams that survive a dying upstream: forward a stream, and continue it when it breaks.

With ``[models.X] resume_streams = true``, an upstream stream is forwarded through
``StreamResume.chunks``: whole SSE events only (the bytes of an unfinished event wait for its
end, which a client could not have used earlier anyway), so what the client holds always ends
at an event boundary. When the stream breaks (a transport error, an upstream error event, or an
end without ``[DONE]``) after bytes went out, it is continued as ``hasten.proxy.continuation``
decides: regenerated on another deployment and spliced (``hasten.proxy.splice.Splice``), else
prefilled, else it ends with the clean error event as before. Every continuation says what
happened in an SSE comment just before ``[DONE]`` (or the error event), which every SSE parser
ignores (``: hasten-resume {"outcome": ...}``); a data event without ``choices`` would break
clients that index ``choices[0]``.

Only a regenerated answer may be cached: the splice checked that it repeats the delivered text,
so delivered + continuation is one consistent answer of the request, with its own usage. A
prefilled one is not: its text came from two requests (the second one's usage counts the
prefix as prompt) and it is not what the request gives when asked again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from hasten.apis.chat import STREAM_ERROR_CODE, event_error
from hasten.errors import HastenError, UpstreamError
from hasten.proxy.continuation import (
    FAILED,
    PREFILLED,
    REGENERATED,
    is_deterministic,
    prefill_body,
    prefill_target,
    regenerate_excluded,
)
from hasten.proxy.splice import Splice
from hasten.routing.models import Route
from hasten.upstream.bounded import TOO_LARGE_CODE, AnswerBytes
from hasten.upstream.client import TOTAL_TIMEOUT_CODE, UpstreamCall
from hasten.wire import exactjson
from hasten.wire.sse import EVENT_END_SUFFIXES, SSEDecoder, last_event_end

__all__ = ["RESUME_HEADER", "StreamResume", "resume_header"]

_log = logging.getLogger("hasten.proxy")

RESUME_HEADER = b"x-hasten-resume"
TRAILER_PREFIX = b": hasten-resume "
_DONE_LINE = b"data: [DONE]"
# Continuations one broken stream may get (each may break again): bounded, like retries.
MAX_CONTINUATIONS = 3
# A stream that failed so is not continued: it had all the time, or all the bytes, one
# answer may take.
_FINAL_CODES = frozenset({TOTAL_TIMEOUT_CODE, TOO_LARGE_CODE})

Opener = Callable[[bytes, frozenset[str]], Awaitable[UpstreamCall]]


class _Forwarded:
    """What went to the client, in whole events; notices the ways a stream can break."""

    __slots__ = ("error", "parts", "tail")

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts  # shared by every stream of one answer: the client's bytes
        self.tail = b""  # an unfinished event, held until it ends
        self.error: HastenError | None = None

    def take(self, chunk: bytes) -> bytes:
        """What of ``chunk`` may go to the client now (whole events, no error event)."""
        # The hot path of every chunk of every resumable stream: one event, whole, no error.
        if self.tail or not chunk.endswith(b"\n\n") or b'"error"' in chunk:
            return self.take_slowly(chunk)
        self.parts.append(chunk)
        return chunk

    def take_slowly(self, chunk: bytes) -> bytes:
        """``take`` for a chunk that may hold part of an event or an error event."""
        data = self.tail + chunk if self.tail else chunk
        if data.endswith(EVENT_END_SUFFIXES):
            self.tail = b""
        else:
            end = last_event_end(data)
            data, self.tail = data[:end], data[end:]
        if b'"error"' in data:
            data = self._cut_at_error(data)
        if data:
            self.parts.append(data)
        return data

    @property
    def is_done(self) -> bool:
        """True once the client has the stream's ``[DONE]`` (with any line ends)."""
        return bool(self.parts) and self.parts[-1].rstrip(b"\r\n").endswith(_DONE_LINE)

    def _cut_at_error(self, data: bytes) -> bytes:
        """``data`` up to an upstream error event, which ends the stream (and is not sent)."""
        for payload in SSEDecoder().feed(data):
            if b'"error"' in payload and (error := _stream_error(payload)) is not None:
                self.error = error
                at = data.rfind(b'"error"')
                start = data.rfind(b"\n\n", 0, at)
                return data[: start + 2] if start >= 0 else b""
        return data


class StreamResume:
    """One upstream answer of a route that resumes streams; ``outcome`` says what happened."""

    __slots__ = ("_body", "_endpoint", "_open", "_parts", "_route", "deployment", "outcome")

    def __init__(
        self, opener: Opener, route: Route, endpoint: str, body: Callable[[], bytes]
    ) -> None:
        # The body as sent, built only if a continuation needs it (never on an unbroken stream).
        self._open, self._route, self._endpoint, self._body = opener, route, endpoint, body
        self._parts: list[bytes] = []
        self.outcome = ""  # "" (never broke) or one of continuation.RESUME_OUTCOMES
        self.deployment = ""  # the deployment that finished the answer

    @property
    def is_cacheable(self) -> bool:
        """True unless the answer was prefilled or failed (see the module's docstring)."""
        return self.outcome in ("", REGENERATED)

    async def chunks(self, call: UpstreamCall) -> AsyncIterator[bytes]:
        """``call``'s stream in whole events, continued if it breaks; raises when it cannot be."""
        forwarded = _Forwarded(self._parts)
        keep = self._parts.append
        failure: HastenError | None = None
        try:
            async for chunk in call.iter_chunks():
                # Forwarded.take's fast path, inlined: this runs for every chunk of every
                # resumable stream, and almost every chunk is one whole event.
                if forwarded.tail or not chunk.endswith(b"\n\n") or b'"error"' in chunk:
                    chunk = forwarded.take_slowly(chunk)
                    if forwarded.error is not None:
                        if chunk:
                            yield chunk
                        break
                    if not chunk:
                        continue
                else:
                    keep(chunk)
                yield chunk
        except HastenError as exc:
            failure = exc
        if forwarded.is_done:
            return  # whatever broke after [DONE] broke nothing the client needed
        if failure is not None and failure.code in _FINAL_CODES:
            raise failure  # all the time or all the bytes an answer may take: no second go
        failure = failure or forwarded.error or _incomplete()
        count = AnswerBytes(call.upstream.max_answer_bytes)
        async for data in self._continue(frozenset((call.upstream.name,)), failure, count):
            yield data

    async def _continue(
        self, failed: frozenset[str], failure: HastenError, count: AnswerBytes
    ) -> AsyncIterator[bytes]:
        """Continuations until one ends the stream; what they add to what the client got
        counts against the first upstream's ``max_answer_bytes`` (``count``), as one
        answer."""
        sent_body = self._body()
        body = exactjson.loads(sent_body)
        can_regenerate = is_deterministic(body)
        count.add(sum(len(part) for part in self._parts))
        for _ in range(MAX_CONTINUATIONS):
            sent = b"".join(self._parts)
            mode = REGENERATED if can_regenerate else PREFILLED
            opened = self._request(sent_body, body, sent, failed, mode)
            if opened is None:
                break
            excluded, request = opened
            try:
                call = await self._open(request, excluded)
            except HastenError as exc:
                failure, can_regenerate = exc, False
                continue
            splice = Splice(sent, self._endpoint, is_continuation=mode == PREFILLED)
            forwarded = _Forwarded(self._parts)
            try:
                async for data in self._spliced(call, splice, forwarded, mode):
                    count.add(len(data))
                    yield data
            except HastenError as exc:
                failure = exc
            finally:
                call.close()
            if failure.code in _FINAL_CODES:
                break
            if splice.mismatch is not None:
                _log.info("stream resume: %s on %s: %s", mode, call.upstream.name, splice.mismatch)
                can_regenerate = False
                continue
            if forwarded.is_done:
                return
            failure = forwarded.error or failure
            failed = failed | {call.upstream.name}
        self.outcome = FAILED
        yield self._trailer(len(b"".join(self._parts)))
        raise failure

    def _request(
        self, raw: bytes, body: dict[str, Any], sent: bytes, failed: frozenset[str], mode: str
    ) -> tuple[frozenset[str], bytes] | None:
        """(the deployments to avoid, the body) of the next continuation; None: none is left."""
        if mode == REGENERATED:
            return regenerate_excluded(self._route, failed), raw
        target = prefill_target(self._route, failed)
        probe = Splice(sent, self._endpoint, is_continuation=True)
        if target is None or probe.mismatch is not None or not probe.has_only_text:
            return None
        if probe.num_delivered_choices > 1:
            return None
        continued = prefill_body(body, self._endpoint, probe.delivered_text(), target.mechanism)
        if continued is None:
            return None
        return target.excluded, exactjson.dumps(continued)

    async def _spliced(
        self, call: UpstreamCall, splice: Splice, forwarded: _Forwarded, mode: str
    ) -> AsyncIterator[bytes]:
        if call.status != 200:
            await call.read()
            raise UpstreamError(f"a continuation was refused with status {call.status}")
        num_sent = len(b"".join(self._parts))
        async for chunk in call.iter_chunks():
            out = splice.feed(chunk)
            if splice.mismatch is not None:
                return
            data = forwarded.take(out) if out else b""
            if forwarded.is_done:
                self.outcome, self.deployment = mode, call.upstream.name
                _log.info("stream resumed: %s on %s", mode, call.upstream.name)
                at = data.rfind(_DONE_LINE)
                data = data[:at] + self._trailer(num_sent) + data[at:]
            if data:
                yield data
            if forwarded.error is not None or forwarded.is_done:
                return
        splice.finish()

    def _trailer(self, num_bytes: int) -> bytes:
        note = {"outcome": self.outcome, "deployment": self.deployment, "after_bytes": num_bytes}
        return TRAILER_PREFIX + orjson.dumps(note) + b"\n\n"


def _incomplete() -> UpstreamError:
    return UpstreamError("upstream stream ended before it was complete", code=STREAM_ERROR_CODE)


def resume_header(body: bytes) -> tuple[bytes, bytes] | None:
    """``x-hasten-resume: <outcome>`` for an answer whose stream carries a resume trailer."""
    at = body.rfind(b"\n" + TRAILER_PREFIX)
    if at < 0:
        return None
    end = body.find(b"\n", at + 1)
    try:
        note = orjson.loads(body[at + 1 + len(TRAILER_PREFIX) : end])
    except orjson.JSONDecodeError:
        return None
    outcome = note.get("outcome") if isinstance(note, dict) else None
    return (RESUME_HEADER, outcome.encode()) if isinstance(outcome, str) else None


def _stream_error(payload: bytes) -> UpstreamError | None:
    """The error a chat stream's ``{"error": ...}`` event stands for; None for another."""
    try:
        return event_error(orjson.loads(payload))
    except orjson.JSONDecodeError:
        return None

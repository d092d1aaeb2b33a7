"""Records an upstream answer while it is forwarded, and stores it only if it is whole.

A stream counts as whole when it ended properly: with ``data: [DONE]`` and nothing after
it, no error event, nothing unparseable, and, for chat and completions, a ``finish_reason``
for every choice it opened (a stream cut short can still end with ``[DONE]``). A JSON body
is whole when it parses to an object without an ``error``. Anything else (a cut stream, an
upstream error, a cancelled call) never reaches the cache.

What is recorded are the chunks as forwarded: the flight's own objects, so a recorded answer
is held once, not twice; its events are decoded once more only to be stored.
"""

from __future__ import annotations

from typing import Any

import orjson

from hasten.cache import CachedAnswer, TieredCache
from hasten.proxy.ending import StreamEnd
from hasten.upstream.integrity import EventSink
from hasten.values.usage import is_usage_chunk, is_usage_value
from hasten.wire.sse import DONE, SSEDecoder

_UNPARSEABLE = object()


class Recorder:
    """Records one answer: its chunks as forwarded (``feed``), and, for a stream, whether it
    ended properly, from the events the stream's guard decoded and parsed anyway once
    ``listen`` was called, else from decoding the chunks itself."""

    __slots__ = (
        "_cache",
        "_decoder",
        "_end",
        "_endpoint",
        "_has_pending",
        "_is_listening",
        "_key",
        "_num_chunk_events",
        "_parts",
        "_then",
        "_ttl_s",
        "_usage_tail",
    )

    def __init__(
        self, cache: TieredCache, key: str, endpoint: str, is_stream: bool, *, ttl_s: float
    ) -> None:
        self._cache, self._key, self._endpoint = cache, key, endpoint
        self._ttl_s = ttl_s
        self._decoder = SSEDecoder() if is_stream else None
        self._end = StreamEnd(endpoint) if is_stream else None
        self._parts: list[bytes] = []  # the chunks as forwarded (shared, never copied)
        self._is_listening = False
        self._then: EventSink | None = None
        self._has_pending = False
        # Listening: the events since the last ``feed`` and whether each of the last two
        # was a usage chunk (newest last), which is what ``feed`` reports of a chunk.
        self._num_chunk_events = 0
        self._usage_tail = (False, False)

    def listen(self, then: EventSink | None = None) -> EventSink | None:
        """The sink to hand the call's guard; each event is passed on to ``then``.

        For a stream only (None otherwise, and nothing changes): ``feed`` then only
        counts what the events showed instead of decoding the chunk again.
        """
        if self._decoder is None:
            return then
        self._is_listening, self._then = True, then
        return self

    def event(self, payload: bytes, parsed: Any) -> None:
        assert self._end is not None
        self._end.event(parsed)
        is_usage = (
            isinstance(parsed, dict)
            and parsed.get("usage") is not None
            and not parsed.get("choices")
            and is_usage_value(payload)
        )
        self._num_chunk_events += 1
        self._usage_tail = (self._usage_tail[1], is_usage)
        if self._then is not None:
            self._then.event(payload, parsed)

    def done(self) -> None:
        assert self._end is not None
        self._end.done()
        self._num_chunk_events += 1
        self._usage_tail = (self._usage_tail[1], False)
        if self._then is not None:
            self._then.done()

    def end(self, tail: bytes) -> None:
        self._has_pending = bool(tail.strip())
        if self._then is not None:
            self._then.end(tail)

    def feed(self, chunk: bytes) -> int:
        """Records a chunk; returns how many usage-only stream events it completed.

        The stream is decoded here anyway, so this is where clients that did not ask for
        usage learn which chunk to look inside (see ``hasten.wire.sse.UsageStripper``). The
        usage chunk comes last but for ``[DONE]``: only a chunk's last two events can be it.
        """
        self._parts.append(chunk)
        if self._is_listening:
            num_events, (previous, last) = self._num_chunk_events, self._usage_tail
            self._num_chunk_events, self._usage_tail = 0, (False, False)
            return int(last) + int(previous and num_events > 1)
        decoder, end = self._decoder, self._end
        if decoder is None or end is None:
            return 0
        payloads = decoder.feed(chunk)
        if not payloads:
            return 0
        for payload in payloads:
            if payload == DONE:
                end.done()
            else:
                end.event(_parsed(payload))
        count = int(is_usage_chunk(payloads[-1]))
        if len(payloads) > 1 and is_usage_chunk(payloads[-2]):
            count += 1
        return count

    def answer(self) -> CachedAnswer | None:
        """The complete answer, or None when what was recorded must not be stored."""
        body = b"".join(self._parts)
        if self._decoder is None:
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(parsed, dict) or "error" in parsed:
                return None
            return CachedAnswer.from_body(body, endpoint=self._endpoint, ttl_s=self._ttl_s)
        assert self._end is not None
        has_pending = self._has_pending if self._is_listening else self._decoder.has_pending
        if not self._end.is_whole(has_pending):
            return None
        events = SSEDecoder().feed(body)
        if DONE not in events:
            return None
        chunks = events[: events.index(DONE)]
        return CachedAnswer.from_chunks(chunks, endpoint=self._endpoint, ttl_s=self._ttl_s)

    def commit(self) -> bool:
        """Stores the answer if it is whole; the write to slower tiers runs in the background."""
        answer = self.answer()
        if answer is None:
            return False
        self._cache.put(self._key, answer)
        return True

    def commit_local(self) -> bool:
        """Stores a whole answer in L1 only: for a copy whose leader stored it everywhere."""
        answer = self.answer()
        if answer is None:
            return False
        self._cache.l1.put(self._key, answer)
        return True


def _parsed(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _UNPARSEABLE

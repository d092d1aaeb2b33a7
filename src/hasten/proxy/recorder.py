"""Records an upstream answer while it is forwarded, and stores it only if it is whole.

A stream counts as whole when it ended with ``data: [DONE]`` and carried no error event;
a JSON body when it parses to an object without an ``error``. Anything else (a cut
stream, an upstream error, a cancelled call) never reaches the cache.
"""

from __future__ import annotations

from typing import Any

import orjson

from hasten.cache import CachedAnswer, TieredCache
from hasten.upstream.integrity import EventSink
from hasten.values.usage import is_usage_chunk, is_usage_value
from hasten.wire.sse import DONE, SSEDecoder


class Recorder:
    """Records one answer: from its bytes (``feed``), or, once ``listen`` was called, from
    the events the stream's guard decoded and parsed anyway (no second decode)."""

    __slots__ = (
        "_cache",
        "_decoder",
        "_endpoint",
        "_has_pending",
        "_is_listening",
        "_is_stream",
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
        self._is_stream, self._ttl_s = is_stream, ttl_s
        self._decoder = SSEDecoder() if is_stream else None
        self._parts: list[bytes] = []
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
        self._parts.append(payload)
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
        self._parts.append(DONE)
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
        if self._is_listening:
            num_events, (previous, last) = self._num_chunk_events, self._usage_tail
            self._num_chunk_events, self._usage_tail = 0, (False, False)
            return int(last) + int(previous and num_events > 1)
        decoder = self._decoder
        if decoder is None:
            self._parts.append(chunk)
            return 0
        payloads = decoder.feed(chunk)
        if not payloads:
            return 0
        self._parts.extend(payloads)
        count = int(is_usage_chunk(payloads[-1]))
        if len(payloads) > 1 and is_usage_chunk(payloads[-2]):
            count += 1
        return count

    def answer(self) -> CachedAnswer | None:
        """The complete answer, or None when what was recorded must not be stored."""
        if self._decoder is not None:
            return self._stream_answer(self._decoder)
        body = b"".join(self._parts)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(parsed, dict) or "error" in parsed:
            return None
        return CachedAnswer.from_body(body, endpoint=self._endpoint, ttl_s=self._ttl_s)

    def _stream_answer(self, decoder: SSEDecoder) -> CachedAnswer | None:
        events = self._parts
        has_pending = self._has_pending if self._is_listening else decoder.has_pending
        if has_pending or not events or events[-1] != DONE:
            return None
        chunks = events[:-1]
        for event in chunks:
            if b'"error"' in event and _is_error_event(event):
                return None
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


def _is_error_event(event: bytes) -> bool:
    try:
        parsed = orjson.loads(event)
    except orjson.JSONDecodeError:
        return True  # unparseable data is not an answer we can vouch for
    return isinstance(parsed, dict) and "error" in parsed

"""Incremental server-sent-events decoding, for recording a stream while forwarding it.

The gateway forwards upstream bytes untouched; the decoder only watches them, so a
stream can be stored in the cache as its sequence of event payloads. It runs on every
chunk of every recorded stream, so it leans on C-speed ``bytes`` methods. The one
exception to "untouched" is ``UsageStripper``: a client that did not ask for usage must
not get the usage-only event the gateway asked for on the cache's behalf.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from hasten.cache.replay import is_usage_chunk, num_usage_values

DONE = b"[DONE]"
_DATA_PREFIX = b"data: "
_BOM = "\ufeff".encode()
# An event ends at a blank line: two line ends in a row, each CRLF, LF or CR. A CR that
# is half of a CRLF must not count as a line end of its own, hence the lookahead.
EVENT_END = re.compile(rb"((?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n))")
# Endings that certainly close an event; anything else takes the regex path.
EVENT_END_SUFFIXES = (b"\n\n", b"\r\r", b"\r\n\r\n")


class SSEDecoder:
    """Feeds raw bytes, returns complete ``data:`` payloads (multi-line data joined by \\n)."""

    __slots__ = ("_buffer", "_is_skipping_lf", "_is_started")

    def __init__(self) -> None:
        self._buffer = b""
        self._is_skipping_lf = False
        self._is_started = False

    def feed(self, data: bytes) -> list[bytes]:
        if not self._is_started and data:
            # The spec strips one byte order mark at the start of the stream; left in, it
            # would make the first field "\ufeffdata" and drop that event.
            self._is_started = True
            data = data.removeprefix(_BOM)
        if self._is_skipping_lf or b"\r" in data:
            data = self._normalize(data)
        buffer = self._buffer + data if self._buffer else data
        if b"\n\n" not in buffer:
            self._buffer = buffer
            return []
        *events, self._buffer = buffer.split(b"\n\n")
        payloads: list[bytes] = []
        for event in events:
            payload = event_data(event)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def _normalize(self, data: bytes) -> bytes:
        """Maps \\r\\n and lone \\r line ends to \\n (the spec allows all three)."""
        if self._is_skipping_lf and data.startswith(b"\n"):
            data = data[1:]
        # A trailing \r already ends its line; if the next chunk opens with \n, that \n
        # is the second half of the same \r\n and must not end another line.
        self._is_skipping_lf = data.endswith(b"\r")
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    @property
    def is_idle(self) -> bool:
        """True when nothing is buffered: the next chunk starts at an event's beginning."""
        return not self._buffer and not self._is_skipping_lf

    @property
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a truncated stream)."""
        return bool(self._buffer.strip())


def event_data(event: bytes) -> bytes | None:
    """The data of one event (its blank line already split off); None for one without data."""
    # Fast path: the common one-line `data: {...}` event.
    if event.startswith(_DATA_PREFIX) and b"\n" not in event:
        return event[len(_DATA_PREFIX) :]
    lines: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None  # comments and keep-alives carry no data
    return b"\n".join(lines)


class UsageStripper:
    """Drops usage-only events from a forwarded stream, for a client that did not ask for usage.

    Exact under any split: the bytes of an unfinished event are held until the event ends
    (a client cannot act on half an event, so nothing it could use is delayed), everything
    else passes through untouched. The caller says which chunk completes a usage event and how
    many (the recorder has already decoded them for the cache), so only that chunk is looked
    into, from its end; any other chunk costs one ``endswith``.
    """

    __slots__ = ("_held", "_is_skipping_lf")

    def __init__(self) -> None:
        self._held = b""
        self._is_skipping_lf = False

    def feed(self, chunk: bytes, num_usage_events: int) -> bytes:
        if self._is_skipping_lf and chunk:
            # The dropped event ended in a CR whose LF only came now: it goes too.
            self._is_skipping_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        held = self._held
        data = held + chunk if held else chunk
        if not num_usage_events and data.endswith(EVENT_END_SUFFIXES):
            if held:
                self._held = b""
            return data
        end = last_event_end(data)
        self._held = data[end:]
        if not num_usage_events:
            return data[:end]
        if b"\r" in data:
            return self._drop_usage_events(data[:end])
        # The usage event comes last but for [DONE]: look from the end, and only that far.
        while num_usage_events and end:
            index = data.rfind(b"\n\n", 0, end - 2)
            start = 0 if index < 0 else index + 2
            if _is_usage_event(data[start : end - 2]):
                data = data[:start] + data[end:]
                num_usage_events -= 1
            end = start
        return data[: len(data) - len(self._held)]

    def _drop_usage_events(self, data: bytes) -> bytes:
        """Drops every usage event from whole events whose line ends may include CRs."""
        parts = EVENT_END.split(data)  # event, end, event, end, ..., "" (nothing unfinished)
        kept: list[bytes] = []
        is_dropped = False
        for i in range(0, len(parts) - 1, 2):
            event = parts[i]
            is_dropped = _is_usage_event(event)
            if not is_dropped:
                kept += (event, parts[i + 1])
            elif event[:1] in b"\r\n":
                # Line ends before the event are the rest of the previous one (a CRLF split
                # between chunks): they stay, so the client still gets that event intact.
                kept.append(event[: len(event) - len(event.lstrip(b"\r\n"))])
        self._is_skipping_lf = is_dropped and not self._held and data.endswith(b"\r")
        return b"".join(kept)

    def finish(self) -> bytes:
        """The unfinished event still held when the stream ends, to forward as it came."""
        held, self._held = self._held, b""
        return held


def usage_marks(chunk: bytes) -> int:
    """At least how many usage events ``chunk`` completes, from its bytes alone (for a
    stream nothing decodes): ``UsageStripper`` drops only the usage events among them."""
    return num_usage_values(chunk) if b'"usage"' in chunk else 0


async def without_usage(chunks: AsyncIterator[bytes], tail: list[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` minus their usage-only events, for a client that did not ask for usage
    where hasten asked upstream for it (a key whose limits read it) and nothing recorded the
    stream to say which chunk holds it; ``tail`` keeps the last two chunks as they came
    (where the usage is)."""
    stripper = UsageStripper()
    async for chunk in chunks:
        tail[:] = (*tail[-1:], chunk)
        data = stripper.feed(chunk, usage_marks(chunk))
        if data:
            yield data
    rest = stripper.finish()
    if rest:
        yield rest


def last_event_end(data: bytes) -> int:
    """Where the last complete event in ``data`` ends (0: none does)."""
    if data.endswith(b"\n\n"):
        return len(data)  # the common case: upstreams send whole events
    if b"\r" not in data:
        index = data.rfind(b"\n\n")
        return 0 if index < 0 else index + 2
    end = 0
    for match in EVENT_END.finditer(data):
        end = match.end()
    return end


def _is_usage_event(event: bytes) -> bool:
    if b'"usage"' not in event:
        return False  # the common case, without copying the event
    if b"\r" in event:
        event = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    payload = event_data(event)
    return payload is not None and is_usage_chunk(payload)

"""Incremental server-sent-events decoding, for recording a stream while forwarding it.

The gateway forwards upstream bytes untouched; the decoder only watches them, so a
stream can be stored in the cache as its sequence of event payloads. It runs on every
chunk of every recorded stream, so it leans on C-speed ``bytes`` methods. The one
exception to "untouched" is ``UsageStripper``: a client that did not ask for usage must
not get the usage-only event the gateway asked for on the cache's behalf.
"""

from __future__ import annotations

import re

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
    # And a named one: ``event: <type>`` then one ``data: {...}`` line (every event of the
    # Responses and Messages APIs).
    if event.startswith(b"event:"):
        at = event.find(b"\n") + 1
        if at and event.startswith(_DATA_PREFIX, at) and event.find(b"\n", at) < 0:
            return event[at + len(_DATA_PREFIX) :]
    lines: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None  # comments and keep-alives carry no data
    return b"\n".join(lines)


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

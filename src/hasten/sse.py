"""Incremental server-sent-events decoding, for recording a stream while forwarding it.

The gateway forwards upstream bytes untouched; this decoder only watches them, so a
stream can be stored in the cache as its sequence of event payloads.
"""

from __future__ import annotations

DONE = b"[DONE]"
_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


class SSEDecoder:
    """Feeds raw bytes, returns complete ``data:`` payloads (multi-line data joined by \\n)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data if self._buffer else data
        payloads: list[bytes] = []
        start = 0
        while True:
            end, width = _next_separator(buffer, start)
            if end < 0:
                break
            payload = _event_data(buffer[start:end])
            if payload is not None:
                payloads.append(payload)
            start = end + width
        self._buffer = buffer[start:]
        return payloads

    @property
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a truncated stream)."""
        return bool(self._buffer.strip())


def _next_separator(buffer: bytes, start: int) -> tuple[int, int]:
    best, width = -1, 0
    for separator in _SEPARATORS:
        index = buffer.find(separator, start)
        if index >= 0 and (best < 0 or index < best):
            best, width = index, len(separator)
    return best, width


def _event_data(event: bytes) -> bytes | None:
    lines: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None  # comments and keep-alives carry no data
    return b"\n".join(lines)

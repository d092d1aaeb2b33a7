"""Incremental server-sent-events decoding, for recording a stream while forwarding it.

The gateway forwards upstream bytes untouched; this decoder only watches them, so a
stream can be stored in the cache as its sequence of event payloads. It runs on every
chunk of every recorded stream, so it leans on C-speed ``bytes`` methods.
"""

from __future__ import annotations

DONE = b"[DONE]"
_DATA_PREFIX = b"data: "


class SSEDecoder:
    """Feeds raw bytes, returns complete ``data:`` payloads (multi-line data joined by \\n)."""

    __slots__ = ("_buffer", "_is_skipping_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._is_skipping_lf = False

    def feed(self, data: bytes) -> list[bytes]:
        if self._is_skipping_lf or b"\r" in data:
            data = self._normalize(data)
        buffer = self._buffer + data if self._buffer else data
        if b"\n\n" not in buffer:
            self._buffer = buffer
            return []
        *events, self._buffer = buffer.split(b"\n\n")
        payloads: list[bytes] = []
        for event in events:
            payload = _event_data(event)
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
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a truncated stream)."""
        return bool(self._buffer.strip())


def _event_data(event: bytes) -> bytes | None:
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

"""What a flight looks like on a Redis stream, and how a follower re-reads it (pure).

The leading replica publishes its flight as entries: one ``start`` (status, headers,
upstream name, TTFB), ``chunk`` entries (raw bytes and the usage-event count
``Flight.push`` takes) and one ``end`` (empty when the answer completed, else the error's
JSON). Every entry carries its sequence number, so a reader notices a trimmed gap instead
of splicing around it.

A follower pushes only whole SSE events into its own flight (``Framer``): if the leader
dies mid-event, what its clients got so far still ends at an event boundary, so a new
answer can be spliced after it (``hasten.proxy.resume.Splice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from hasten.errors import HastenError, RelayedError
from hasten.proxy.sse import last_event_end

START = b"s"
CHUNK = b"c"
END = b"e"


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded stream entry."""

    kind: bytes
    seq: int
    data: bytes
    num_usage_events: int = 0


def start_fields(
    seq: int, status: int, headers: Mapping[str, str], upstream_name: str, ttfb_ms: float
) -> list[bytes]:
    head = {
        "status": status,
        "headers": {str(k): str(v) for k, v in headers.items()},
        "upstream": upstream_name,
        "ttfb_ms": ttfb_ms,
    }
    return [START, str(seq).encode(), orjson.dumps(head), b"0"]


def chunk_fields(seq: int, chunk: bytes, num_usage_events: int) -> list[bytes]:
    return [CHUNK, str(seq).encode(), chunk, str(num_usage_events).encode()]


def end_fields(seq: int, error: HastenError | None) -> list[bytes]:
    data = b"" if error is None else orjson.dumps({"status": error.status_code, **error.to_dict()})
    return [END, str(seq).encode(), data, b"0"]


def decode_entry(fields: Mapping[bytes, bytes]) -> Entry:
    """An entry as XREAD returns its fields (``k``, ``n``, ``d``, ``u``)."""
    return Entry(fields[b"k"], int(fields[b"n"]), fields[b"d"], int(fields.get(b"u", b"0")))


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    headers: dict[str, str]
    upstream_name: str
    ttfb_ms: float


def decode_head(data: bytes) -> Head:
    head = orjson.loads(data)
    return Head(
        int(head["status"]), dict(head["headers"]), str(head["upstream"]), float(head["ttfb_ms"])
    )


def decode_error(data: bytes) -> HastenError | None:
    """The error an ``end`` entry carries, as the leader's clients saw it; None for success."""
    if not data:
        return None
    parsed = orjson.loads(data)
    error = parsed.get("error") or {}
    return RelayedError(
        str(error.get("message") or "upstream call failed on another replica"),
        status_code=int(parsed.get("status") or 502),
        error_type=str(error.get("type") or "upstream_error"),
        code=error.get("code"),
    )


def is_whole_stream(chunks: list[bytes]) -> bool:
    """True when what was pushed already ends with ``[DONE]``: nothing is left to send."""
    return b"".join(chunks[-2:]).rstrip().endswith(b"data: [DONE]")


class Framer:
    """Holds bytes back until they end a whole SSE event."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        end = last_event_end(buffer)
        self._buffer = buffer[end:]
        return buffer[:end]

    @property
    def rest(self) -> bytes:
        return self._buffer

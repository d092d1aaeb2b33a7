"""What a flight looks like on a Redis stream, and how a follower re-reads it (no I/O).

The leading replica publishes its flight as entries: one ``start`` (status, headers,
upstream name, TTFB), ``chunk`` entries (raw bytes and the usage-event count
``Flight.push`` takes) and one ``end`` (empty when the answer completed, else the error's
JSON). Every entry carries its sequence number, so a reader notices a trimmed gap instead
of splicing around it.

A follower's ``Feed`` applies one answer's entries to its own flight. It pushes only whole
SSE events (``Framer``): if the leader dies mid-event, what its clients got so far still
ends at an event boundary, so the next answer's ``Feed`` can splice after it
(``hasten.proxy.splice.Splice``), or end the flight with a clean error when it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from hasten.config.tables import DEFAULT_MAX_ANSWER_BYTES
from hasten.errors import HastenError, RelayedError, UpstreamError
from hasten.proxy.flight import Flight
from hasten.proxy.recorder import Recorder
from hasten.proxy.splice import Splice
from hasten.upstream.bounded import AnswerBytes
from hasten.upstream.integrity import MAX_EVENT_BYTES, malformed
from hasten.wire.sse import last_event_end

START = b"s"
CHUNK = b"c"
END = b"e"
# The lease was given back before any upstream call (the request it was asked for hit):
# a follower takes over at once, as a leader that calls upstream for the first time.
RELEASED = b"r"


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


def released_fields() -> list[bytes]:
    return [RELEASED, b"0", b"", b"0"]


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
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
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
    """Holds bytes back until they end a whole SSE event (at most ``MAX_EVENT_BYTES``)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        end = last_event_end(buffer)
        self._buffer = buffer[end:]
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise malformed(f"an event of over {MAX_EVENT_BYTES} bytes")
        return buffer[:end]

    @property
    def rest(self) -> bytes:
        return self._buffer


class Feed:
    """One answer's entries into a follower's flight, spliced after what it already has."""

    __slots__ = ("_count", "_flight", "_framer", "_head", "_held", "_recorder", "_splice")

    def __init__(
        self,
        flight: Flight,
        recorder: Recorder | None,
        *,
        is_sse: bool,
        endpoint: str,
        max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._flight, self._recorder = flight, recorder
        # What a follower holds of the answer is bounded as the leader's call is: a
        # leader with a larger cap (or a stream written by anything else) cannot exceed it.
        self._count = AnswerBytes(max_bytes)
        self._framer = Framer() if is_sse else None
        has_sent = is_sse and bool(flight.chunks)
        self._splice = Splice(b"".join(flight.chunks), endpoint) if has_sent else None
        self._head: Head | None = None
        self._held: list[bytes] = []  # a JSON body is pushed only once it is whole

    def take(self, entry: Entry) -> bool:
        """Applies one entry; True once the flight is finished."""
        try:
            if entry.kind == START:
                self.start(decode_head(entry.data))
            elif entry.kind == CHUNK:
                self.push(entry.data)
            else:
                error = decode_error(entry.data)
                if error is not None:
                    self._flight.finish(error)
                    return True
                self.finish()
        except HastenError as exc:
            self._flight.finish(exc)
            return True
        if entry.kind != END:
            return False
        self._flight.finish()
        if self._flight.status == 200 and self._recorder is not None:
            self._recorder.commit_local()  # L1 only: see hasten.fleet.coalesce
        return True

    def start(self, head: Head) -> None:
        flight = self._flight
        if flight.is_started:
            if head.status != flight.status:
                raise _not_continued(f"the new answer has status {head.status}")
        elif self._framer is not None:
            flight.start(head.status, head.headers, head.upstream_name, head.ttfb_ms)
        self._head = head

    def push(self, data: bytes) -> None:
        self._count.add(len(data))
        if self._framer is None:
            self._held.append(data)
            return
        whole = self._framer.feed(data)
        if not whole:
            return
        if self._splice is None:
            self._emit(whole)
            return
        self._emit_spliced(self._splice, whole)

    def finish(self) -> None:
        if self._framer is None:
            head = self._head
            if head is not None and not self._flight.is_started:
                self._flight.start(head.status, head.headers, head.upstream_name, head.ttfb_ms)
            for part in self._held:
                self._emit(part)
            return
        rest, splice = self._framer.rest, self._splice
        if splice is None:
            if rest:
                self._emit(rest)  # an answer whose last event lacks its blank line
            return
        if rest.strip():
            self._emit_spliced(splice, rest + b"\n\n")
        splice.finish()
        if splice.mismatch is not None:
            raise _not_continued(splice.mismatch)

    def _emit_spliced(self, splice: Splice, data: bytes) -> None:
        out = splice.feed(data)
        if splice.mismatch is not None:
            raise _not_continued(splice.mismatch)
        if out:
            self._emit(out)

    def _emit(self, data: bytes) -> None:
        recorder = self._recorder
        self._flight.push(data, 0 if recorder is None else recorder.feed(data))


def _not_continued(reason: str) -> UpstreamError:
    """Ends a follower's answer cleanly when a new one does not continue what was sent."""
    return UpstreamError(
        f"the answer could not be continued after its leader stopped: {reason}",
        code="resume_mismatch",
    )

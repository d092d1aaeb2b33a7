"""What a flight looks like on a Redis stream, and how a follower re-reads it (pure).

The leading replica publishes its flight as entries: one ``start`` (status, headers,
upstream name, TTFB), ``chunk`` entries (raw bytes and the usage-event count
``Flight.push`` takes) and one ``end`` (empty when the answer completed, else the error's
JSON). Every entry carries its sequence number, so a reader notices a trimmed gap instead
of splicing around it.

A follower pushes only whole SSE events into its own flight (``Framer``): if the leader
dies mid-event, what its clients got so far still ends at an event boundary, and a new
answer can be spliced after it (``Splice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from hasten.cache.replay import is_usage_chunk
from hasten.errors import HastenError, RelayedError, SpliceMismatch
from hasten.proxy.sse import DONE, SSEDecoder

START = b"s"
CHUNK = b"c"
END = b"e"
_DONE_FRAME = b"data: [DONE]\n\n"


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
    """Holds bytes back until they end a whole SSE event (LF, CRLF or CR endings)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data
        end = _last_event_end(buffer)
        self._buffer = buffer[end:]
        return buffer[:end]

    @property
    def rest(self) -> bytes:
        return self._buffer


def _last_event_end(data: bytes) -> int:
    best = 0
    for ending in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = data.rfind(ending)
        if at >= 0:
            best = max(best, at + len(ending))
    return best


class Splice:
    """Continues an answer whose first events already reached clients, from a new answer.

    The new answer must say the same text first (choice 0's content, chat or completions);
    only what follows is emitted, in events that carry the delivered answer's ``id`` and
    ``created``. Anything it cannot line up (another text, several choices, tool calls)
    raises ``SpliceMismatch``: a clean error, never a wrong answer.
    """

    def __init__(self, delivered: bytes) -> None:
        decoder = SSEDecoder()
        events = decoder.feed(delivered)
        self.is_complete = bool(events) and events[-1] == DONE
        parsed = [_load(e) for e in events if e != DONE]
        self._sent = "".join(_text(p) for p in parsed)
        self._has_role = bool(parsed)
        self._has_usage = any(is_usage_chunk(e) for e in events)
        first = parsed[0] if parsed else {}
        self._ids: dict[str, Any] = {k: first[k] for k in ("id", "created") if k in first}
        self._pos = 0
        self._decoder = SSEDecoder()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames to send for ``data`` of the new answer (often none at first)."""
        frames: list[bytes] = []
        for payload in self._decoder.feed(data):
            frame = self._event(payload)
            if frame is not None:
                frames.append(frame)
        return frames

    def finish(self) -> None:
        if self._pos < len(self._sent):
            raise SpliceMismatch("the regenerated answer is shorter than what was sent")

    def _event(self, payload: bytes) -> bytes | None:
        if payload == DONE:
            self.finish()
            return _DONE_FRAME
        event = _load(payload)
        if "error" in event:
            return b"data: " + payload + b"\n\n"
        if not event.get("choices"):
            if self._has_usage:
                return None
            return _frame({**event, **self._ids})
        text = _text(event)
        choice = event["choices"][0]
        sent_left = len(self._sent) - self._pos
        if sent_left > 0:
            overlap = text[:sent_left]
            if self._sent[self._pos : self._pos + len(overlap)] != overlap:
                raise SpliceMismatch("the regenerated text differs from what was sent")
            if choice.get("finish_reason") is not None and len(text) < sent_left:
                raise SpliceMismatch("the regenerated answer is shorter than what was sent")
            self._pos += len(overlap)
            text = text[len(overlap) :]
        self._pos += len(text)
        return self._rest_event(event, choice, text)

    def _rest_event(self, event: dict[str, Any], choice: dict[str, Any], text: str) -> bytes | None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            delta = {k: v for k, v in delta.items() if not (k == "role" and self._has_role)}
            if text:
                delta["content"] = text
            else:
                delta.pop("content", None)
            choice = {**choice, "delta": delta}
            is_empty = not delta
        else:
            choice = {**choice, "text": text}
            is_empty = not text
        if is_empty and choice.get("finish_reason") is None and event.get("usage") is None:
            return None
        self._has_role = True
        return _frame({**event, **self._ids, "choices": [choice]})


def _load(payload: bytes) -> dict[str, Any]:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise SpliceMismatch("an event of the answer is not JSON") from None
    if not isinstance(event, dict):
        raise SpliceMismatch("an event of the answer is not a JSON object")
    return event


def _text(event: dict[str, Any]) -> str:
    """Choice 0's text in one event; what the splice cannot line up raises."""
    choices = event.get("choices") or []
    if not choices:
        return ""
    if len(choices) > 1 or choices[0].get("index", 0) != 0:
        raise SpliceMismatch("an answer with several choices cannot be resumed")
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if {k for k, v in delta.items() if v is not None} - {"role", "content"}:
            raise SpliceMismatch("an answer with tool calls or a refusal cannot be resumed")
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"

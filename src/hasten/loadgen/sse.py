"""Reading an OpenAI server-sent-event stream: incremental framing and chunk meaning.

Kept small and allocation-light because it runs once per received network chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DONE = b"[DONE]"


class SSEParser:
    """Splits an SSE byte stream, fed in arbitrary pieces, into event data payloads."""

    __slots__ = ("_data_lines", "_partial")

    def __init__(self) -> None:
        self._partial = b""
        self._data_lines: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        """The data payloads of the events that ``data`` completes, in order."""
        lines = (self._partial + data).split(b"\n") if self._partial else data.split(b"\n")
        self._partial = lines.pop()
        events: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data_lines:
                    events.append(b"\n".join(self._data_lines))
                    self._data_lines = []
            elif line.startswith(b"data:"):
                payload = line[5:]
                self._data_lines.append(payload[1:] if payload.startswith(b" ") else payload)
            # Comments (":"), "event:", "id:" and "retry:" carry nothing a benchmark needs.
        return events

    def close(self) -> list[bytes]:
        """Whatever event the stream ended inside of: lenient toward a missing final blank line."""
        events = self.feed(b"\n\n") if self._partial or self._data_lines else []
        self._partial = b""
        return events


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """What one ``chat.completion.chunk`` / ``text_completion`` event tells a benchmark."""

    has_content: bool
    completion_tokens: int | None
    is_error: bool
    prompt_tokens: int | None = None


def inspect_chunk(payload: bytes) -> ChunkInfo:
    """Whether a data payload carries generated text, a usage count, or an error."""
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return ChunkInfo(has_content=False, completion_tokens=None, is_error=True)
    if not isinstance(chunk, dict):
        return ChunkInfo(has_content=False, completion_tokens=None, is_error=True)
    return ChunkInfo(
        has_content=_has_content(chunk.get("choices")),
        completion_tokens=completion_tokens(chunk),
        is_error="error" in chunk,
        prompt_tokens=prompt_tokens(chunk),
    )


def _has_content(choices: Any) -> bool:
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        ):
            return True
    return False


def completion_tokens(body: dict[str, Any]) -> int | None:
    """``usage.completion_tokens`` of a response or chunk, when the server reported it."""
    return _usage_count(body, "completion_tokens")


def prompt_tokens(body: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens`` of a response or chunk, when the server reported it."""
    return _usage_count(body, "prompt_tokens")


def _usage_count(body: dict[str, Any], name: str) -> int | None:
    usage = body.get("usage")
    if isinstance(usage, dict):
        tokens = usage.get(name)
        if isinstance(tokens, int):
            return tokens
    return None

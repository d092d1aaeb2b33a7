"""Token counts from an answer's ``usage`` object, read without parsing the whole answer."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import orjson

from hasten.wire.sse import EVENT_END, EVENT_END_SUFFIXES, event_data, last_event_end

_USAGE = b'"usage"'
# OpenAI writes prompt_tokens first: one search finds both; the others are the fallback.
# A count is an integer of at most 15 digits (a float up to it is exact); anything else
# (1e3, 10.0, a thousand digits) is no count this reads: int() of a long digit run raises,
# and a huge one overflows the float sums it feeds.
_COUNT = rb"(\d{1,15})(?![\d.eE])"
_BOTH = re.compile(
    rb'"prompt_tokens"\s*:\s*' + _COUNT + rb'\s*,\s*"completion_tokens"\s*:\s*' + _COUNT
)
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*' + _COUNT)
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*' + _COUNT)


def usage_tokens(data: bytes) -> tuple[int | None, int | None]:
    """(input, output) tokens of the last ``usage`` object in ``data``; None where absent.

    ``data`` is a JSON body or the tail of a stream (usage is in its last event but
    ``[DONE]``); the search starts at the last ``"usage"``, so it costs a scan of the tail.
    """
    at = data.rfind(_USAGE)
    if at < 0:
        return None, None
    both = _BOTH.search(data, at)
    if both is not None:
        return int(both.group(1)), int(both.group(2))
    prompt = _PROMPT.search(data, at)
    completion = _COMPLETION.search(data, at)
    return (
        None if prompt is None else int(prompt.group(1)),
        None if completion is None else int(completion.group(1)),
    )


# A "usage" that is not null: with include_usage every ordinary chunk says "usage":null.
_USAGE_VALUE = re.compile(rb'"usage"(?!:null|: null)')


def is_usage_chunk(chunk: bytes) -> bool:
    """True for the trailing usage-only chunk (empty ``choices``, non-null ``usage``)."""
    return is_usage_value(chunk) and _is_usage_only(chunk)


def is_usage_value(chunk: bytes) -> bool:
    """``is_usage_chunk``'s look at the bytes: a ``"usage"`` that is not null."""
    return _USAGE_VALUE.search(chunk) is not None


def num_usage_values(data: bytes) -> int:
    """How many ``"usage"`` that are not null ``data`` holds: at least its usage chunks."""
    return len(_USAGE_VALUE.findall(data))


def _is_usage_only(chunk: bytes) -> bool:
    try:
        parsed = orjson.loads(chunk)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(parsed, dict) and parsed.get("usage") is not None and not parsed.get("choices")
    )


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


def _is_usage_event(event: bytes) -> bool:
    if b'"usage"' not in event:
        return False  # the common case, without copying the event
    if b"\r" in event:
        event = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    payload = event_data(event)
    return payload is not None and is_usage_chunk(payload)


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

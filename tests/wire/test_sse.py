"""Unit tests for hasten.wire.sse: the SSEDecoder (chunking independence, separators,
comments) and the UsageStripper (the usage-only chunk dropped however the stream is split,
and in a flight's readers); both take any bytes."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis.chat import CHAT_API
from hasten.cache import MemoryLRU, TieredCache
from hasten.proxy.flight import Flight
from hasten.proxy.recorder import Recorder
from hasten.values.usage import UsageStripper
from hasten.wire.sse import DONE, SSEDecoder, event_data

LINE_ENDINGS = (b"\n", b"\r\n", b"\r")


def _decode_whole(stream: bytes) -> list[bytes]:
    return SSEDecoder().feed(stream)


def _decode_chunks(chunks: list[bytes]) -> tuple[list[bytes], SSEDecoder]:
    decoder = SSEDecoder()
    payloads: list[bytes] = []
    for chunk in chunks:
        payloads.extend(decoder.feed(chunk))
    return payloads, decoder


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks, start = [], 0
    for point in points:
        chunks.append(stream[start:point])
        start = point
    chunks.append(stream[start:])
    return chunks


# A single data line's text: no CR/LF (which would end the line).
_line_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=30
).map(lambda s: s.encode())


@st.composite
def _event_list(draw: st.DrawFn) -> list[tuple[bytes, bytes | None]]:
    """Valid SSE events (raw bytes incl. the terminating blank line) and their payloads."""
    events: list[tuple[bytes, bytes | None]] = []
    for _ in range(draw(st.integers(0, 8))):
        eol = draw(st.sampled_from(LINE_ENDINGS))
        kind = draw(st.sampled_from(["data", "data", "comment", "event+data", "id-only"]))
        if kind == "comment":
            events.append((b": " + draw(_line_text) + eol + eol, None))
            continue
        if kind == "id-only":
            events.append((b"id: " + str(draw(st.integers(0, 99))).encode() + eol + eol, None))
            continue
        lines = draw(st.lists(_line_text, min_size=1, max_size=3))
        event = b""
        if kind == "event+data":
            event += b"event: message" + eol
        for line in lines:
            # "data:" takes one optional space; a value starting with a space needs it.
            spaced = line.startswith(b" ") or draw(st.booleans())
            event += (b"data: " if spaced else b"data:") + line + eol
        if draw(st.booleans()):
            event += b": keep-alive" + eol
        events.append((event + eol, b"\n".join(lines)))
    return events


def _join(events: list[tuple[bytes, bytes | None]]) -> tuple[bytes, list[bytes]]:
    stream = b"".join(raw for raw, _ in events)
    return stream, [p for _, p in events if p is not None]


_events = _event_list().map(_join)


@settings(deadline=None)
@given(_events, st.lists(st.integers(0, 2000), max_size=20))
def test_any_split_equals_whole(built: tuple[bytes, list[bytes]], cuts: list[int]) -> None:
    stream, expected = built
    assert _decode_whole(stream) == expected
    payloads, decoder = _decode_chunks(_split(stream, cuts))
    assert payloads == expected
    assert not decoder.has_pending


@settings(deadline=None)
@given(_events)
def test_byte_at_a_time_equals_whole(built: tuple[bytes, list[bytes]]) -> None:
    stream, expected = built
    payloads, decoder = _decode_chunks([stream[i : i + 1] for i in range(len(stream))])
    assert payloads == expected
    assert not decoder.has_pending


def test_lf_separators() -> None:
    stream = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert _decode_whole(stream) == [b'{"a":1}', b'{"a":2}', DONE]


def test_crlf_separators() -> None:
    stream = b'data: {"a":1}\r\n\r\ndata: {"a":2}\r\n\r\ndata: [DONE]\r\n\r\n'
    assert _decode_whole(stream) == [b'{"a":1}', b'{"a":2}', DONE]


def test_cr_separators() -> None:
    assert _decode_whole(b"data: a\r\rdata: b\r\r") == [b"a", b"b"]


def test_crlf_split_inside_separator() -> None:
    decoder = SSEDecoder()
    # A lone CR already ends the empty line (SSE allows CR, LF and CRLF line ends), so the
    # event is complete; the LF that follows is the rest of that CRLF, not a new line.
    assert decoder.feed(b"data: x\r\n\r") == [b"x"]
    assert not decoder.has_pending
    assert decoder.feed(b"\n") == []
    assert not decoder.has_pending


def test_comments_and_keepalives_ignored() -> None:
    stream = b": ping\n\n:\n\ndata: a\n\n: keep-alive\r\n\r\n\n\ndata: b\n\n"
    assert _decode_whole(stream) == [b"a", b"b"]


def test_non_data_fields_ignored() -> None:
    stream = b"event: message\nid: 7\nretry: 1000\ndata: hi\n\nevent: ping\n\n"
    assert _decode_whole(stream) == [b"hi"]


def test_multiline_data_joined_with_newline() -> None:
    assert _decode_whole(b"data: one\ndata: two\ndata:three\n\n") == [b"one\ntwo\nthree"]
    assert _decode_whole(b"data: one\r\ndata: two\r\n\r\n") == [b"one\ntwo"]


def test_only_one_leading_space_stripped() -> None:
    assert _decode_whole(b"data:  x\n\n") == [b" x"]
    assert _decode_whole(b"data:x\n\n") == [b"x"]
    assert _decode_whole(b"data: \n\n") == [b""]


def test_payload_bytes_kept_verbatim() -> None:
    payload = '{"content":"héllo ☃ 👋"}'.encode()
    assert _decode_whole(b"data: " + payload + b"\n\n") == [payload]


def test_utf8_split_mid_character() -> None:
    payload = "☃👋".encode()
    stream = b"data: " + payload + b"\n\n"
    payloads, _ = _decode_chunks([stream[:8], stream[8:]])
    assert payloads == [payload]


def test_empty_feed() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert not decoder.has_pending


def test_has_pending_on_truncated_stream() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: partial") == [b"a"]
    assert decoder.has_pending
    decoder2 = SSEDecoder()
    assert decoder2.feed(b"data: a\n\ndata: b\n") == [b"a"]
    assert decoder2.has_pending
    assert decoder2.feed(b"\n") == [b"b"]
    assert not decoder2.has_pending


def test_whitespace_tail_is_not_pending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n\n") == [b"a"]
    assert not decoder.has_pending


@settings(deadline=None)
@given(_event_list(), st.integers(0, 10_000))
def test_truncation_pending_exactly_inside_an_event(
    events: list[tuple[bytes, bytes | None]], cut: int
) -> None:
    stream, expected = _join(events)
    cut = min(cut, len(stream))
    boundaries = {0}
    offset = 0
    for raw, _ in events:
        offset += len(raw)
        boundaries.add(offset)
    decoder = SSEDecoder()
    payloads = decoder.feed(stream[:cut])
    # A prefix of the stream yields a prefix of the payloads...
    assert payloads == expected[: len(payloads)]
    # ...something is pending exactly when the cut fell inside an event...
    is_inside = cut not in boundaries
    # The one allowed difference: a cut between the CR and LF of a final CRLF, where the
    # CR already completed the event.
    is_crlf_split = stream[:cut].endswith(b"\r") and stream[cut : cut + 1] == b"\n"
    assert decoder.has_pending == is_inside or (is_crlf_split and not decoder.has_pending)
    # ...and the rest of the stream completes the sequence.
    assert payloads + decoder.feed(stream[cut:]) == expected
    assert not decoder.has_pending


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=300), max_size=12))
def test_the_sse_parsers_take_any_bytes(chunks: list[bytes]) -> None:
    decoder, stripper = SSEDecoder(), UsageStripper()
    forwarded = b""
    for chunk in chunks:
        for payload in decoder.feed(chunk):
            assert isinstance(payload, bytes)
        forwarded += stripper.feed(chunk, 0)  # no usage event to drop: bytes pass as sent
    forwarded += stripper.finish()
    assert isinstance(decoder.has_pending, bool)
    assert forwarded == b"".join(chunks)


# --- UsageStripper, under every way the network may split the stream (and in a flight) -

_HEAD = b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
_EVENTS = (
    _HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}],'
    b'"usage":null}',
    # A token that reads "usage" must not be mistaken for the usage chunk.
    _HEAD + b'"choices":[{"index":0,"delta":{"content":"usage"},"finish_reason":null}],'
    b'"usage":null}',
    _HEAD + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}',
    _HEAD + b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}',
    DONE,
)
_USAGE_INDEX = 3


def _stream_bytes(eol: bytes, multiline_usage: bool) -> tuple[bytes, list[bytes]]:
    """The raw stream with ``eol`` line ends, and each event's raw bytes."""
    raws = []
    for i, payload in enumerate(_EVENTS):
        if i == _USAGE_INDEX and multiline_usage:
            # Data split over lines (joined by \n it is still the same JSON) plus a comment.
            head, _, tail = payload.partition(b'"choices"')
            raws.append(b"data: " + head + eol + b": ping" + eol + b'data:"choices"' + tail)
        else:
            raws.append(b"data: " + payload)
        raws[-1] += eol + eol
    return b"".join(raws), raws


def _strip(chunks: list[bytes], eol: bytes, raws: list[bytes]) -> bytes:
    """Runs the recorder (which marks) and the stripper (which drops) like a flight does,
    checking after every chunk that each event the decoder has seen whole was let through."""
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", CHAT_API, True, ttl_s=60)
    decoder = SSEDecoder()
    stripper = UsageStripper()
    kept = [raw for i, raw in enumerate(raws) if i != _USAGE_INDEX]
    expected = b"".join(kept)
    out = b""
    num_seen = 0
    for chunk in chunks:
        out += stripper.feed(chunk, recorder.feed(chunk))
        num_seen += len(decoder.feed(chunk))
        assert expected.startswith(out)
        released = sum(len(raw) for i, raw in enumerate(raws[:num_seen]) if i != _USAGE_INDEX)
        # A CR ends a line, so "...\r\n\r" is a whole event still waiting for its last LF.
        assert len(out) >= released - (eol == b"\r\n")
    out += stripper.finish()
    answer = recorder.answer()
    assert answer is not None and answer.chunks is not None
    assert len(answer.chunks) == len(_EVENTS) - 1  # the cache keeps the usage chunk
    return out


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("multiline_usage", [False, True])
def test_stripper_at_every_split_point(eol: bytes, multiline_usage: bool) -> None:
    stream, raws = _stream_bytes(eol, multiline_usage)
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    assert _strip([stream], eol, raws) == expected
    for cut in range(len(stream) + 1):
        assert _strip([stream[:cut], stream[cut:]], eol, raws) == expected
    usage_start = sum(len(raw) for raw in raws[:_USAGE_INDEX])
    usage_end = usage_start + len(raws[_USAGE_INDEX])
    # Every pair of cuts from just before the usage event to the end of the stream.
    for first in range(usage_start - 8, len(stream) + 1):
        for second in range(max(first, usage_end - 8), len(stream) + 1):
            chunks = [stream[:first], stream[first:second], stream[second:]]
            assert _strip(chunks, eol, raws) == expected
    one_byte_each = [stream[i : i + 1] for i in range(len(stream))]
    assert _strip(one_byte_each, eol, raws) == expected


@settings(deadline=None, max_examples=300)
@given(
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    multiline_usage=st.booleans(),
    cuts=st.lists(st.integers(0, 1200), max_size=12),
)
def test_stripper_under_random_splits(eol: bytes, multiline_usage: bool, cuts: list[int]) -> None:
    stream, raws = _stream_bytes(eol, multiline_usage)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    assert _strip(chunks, eol, raws) == expected


_word = st.text(alphabet="abc usage:{}[],", max_size=12)


def _data_event(payload: bytes, eol: bytes, is_multiline: bool) -> bytes:
    if not is_multiline:
        return b"data: " + payload + eol + eol
    # A data line after each comma: joined by LF it is the same JSON.
    lines = payload.replace(b",", b",\0").split(b"\0")
    return eol.join(b"data: " + line for line in lines) + eol + eol


@st.composite
def _mixed_events(draw: st.DrawFn) -> list[tuple[bytes, bool]]:
    """(raw event, is usage-only): text chunks, comments and blank lines, then maybe the
    usage chunk, then [DONE]; each with its own line ends."""
    events: list[tuple[bytes, bool]] = []
    for _ in range(draw(st.integers(0, 6))):
        eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
        extra = eol * draw(st.integers(0, 2))  # blank lines between events change nothing
        if draw(st.booleans()):
            events.append((b": ping" + eol + eol + extra, False))
            continue
        payload = b'{"choices":[{"delta":{"content":"%s"}}],"usage":null}' % draw(_word).encode()
        events.append((_data_event(payload, eol, draw(st.booleans())) + extra, False))
    if draw(st.booleans()):
        eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
        payload = b'{"choices":[],"usage":{"total_tokens":%d}}' % draw(st.integers(1, 99))
        events.append((_data_event(payload, eol, draw(st.booleans())), True))
    events.append((b"data: [DONE]\n\n", False))
    return events


def _decoded(stream: bytes) -> list[bytes]:
    decoder = SSEDecoder()
    payloads = decoder.feed(stream)
    assert not decoder.has_pending
    return payloads


@settings(deadline=None, max_examples=500)
@given(events=_mixed_events(), cuts=st.lists(st.integers(0, 600), max_size=10))
def test_stripper_with_any_events_and_line_ends(
    events: list[tuple[bytes, bool]], cuts: list[int]
) -> None:
    stream = b"".join(raw for raw, _ in events)
    kept = b"".join(raw for raw, is_usage in events if not is_usage)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", CHAT_API, True, ttl_s=60)
    stripper = UsageStripper()
    out = b"".join([stripper.feed(chunk, recorder.feed(chunk)) for chunk in chunks])
    out += stripper.finish()
    assert _decoded(out) == _decoded(kept)
    # Byte for byte but for where a blank line between events ends up.
    assert out.translate(None, b"\r\n") == kept.translate(None, b"\r\n")


def test_stripper_passes_a_stream_without_usage_untouched() -> None:
    stripper = UsageStripper()
    stream, _ = _stream_bytes(b"\n", False)
    assert stripper.feed(stream, 0) == stream  # not flagged: never looked into
    assert stripper.feed(b"data: {", 0) == b""  # half an event waits...
    assert stripper.finish() == b"data: {"  # ...and goes out as it came if the stream ends


async def test_flight_readers_with_and_without_usage() -> None:
    stream, raws = _stream_bytes(b"\n", False)
    expected = b"".join(raw for i, raw in enumerate(raws) if i != _USAGE_INDEX)
    cut = stream.index(b'"choices":[]')  # the usage event arrives in two pieces
    flight = Flight()
    recorder = Recorder(TieredCache(MemoryLRU(1 << 20)), "k", CHAT_API, True, ttl_s=60)

    async def read(strip: bool) -> bytes:
        chunks = flight.iter_chunks_without_usage() if strip else flight.iter_chunks()
        return b"".join([chunk async for chunk in chunks])

    live = asyncio.gather(read(True), read(False))
    for chunk in (stream[:cut], stream[cut : cut + 5], stream[cut + 5 :]):
        await asyncio.sleep(0)
        flight.push(chunk, recorder.feed(chunk))
    flight.finish()
    assert list(await live) == [expected, stream]
    assert flight.usage_at == {2: 1}
    assert await read(True) == expected  # a late reader replays the recording the same way


def test_a_byte_order_mark_at_the_start_is_stripped() -> None:
    bom = "\ufeff".encode()
    stream = bom + b'data: {"a":1}\n\ndata: [DONE]\n\n'
    for cut in range(len(bom), len(stream)):  # the BOM itself arrives whole, first
        decoder = SSEDecoder()
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == [b'{"a":1}', b"[DONE]"]
    # Only at the start: later, it is part of a line (a field this decoder does not know).
    assert SSEDecoder().feed(b"data: [DONE]\n\n" + bom + b"data: x\n\n") == [b"[DONE]"]


_LINE = st.sampled_from(
    [
        *(b"event: x", b"event:response.created", b"id: 7", b": note", b"retry: 5"),
        *(b"data: {}", b"data:{}", b"data:  [1]", b"data: ", b'data: {"a": 1}'),
    ]
)


@settings(max_examples=300)
@given(st.lists(_LINE, min_size=1, max_size=4))
def test_an_event_reads_as_the_spec_reads_its_lines(lines: list[bytes]) -> None:
    # The fast paths (one data line, alone or after an event line) agree with reading the
    # event line by line: data lines joined by \n, one leading space stripped, none: None.
    event = b"\n".join(lines)
    data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
    assert event_data(event) == (b"\n".join(data) if data else None)

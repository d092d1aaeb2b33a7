"""Unit tests for hasten.proxy.sse.SSEDecoder: chunking independence, separators, comments;
the decoder and the usage stripper take any bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.proxy.sse import DONE, SSEDecoder, UsageStripper

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

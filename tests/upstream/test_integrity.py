"""Unit tests for hasten.upstream.integrity: whole, well-formed events and bodies only."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.errors import UpstreamError
from hasten.upstream.integrity import (
    MAX_EVENT_BYTES,
    StreamGuard,
    check_json_body,
    done_end,
    is_event_stream,
)
from hasten.wire.sse import SSEDecoder
from tests.support.scripted import delta, sse

ONE, TWO = sse(delta("one"), delta("two"))
DONE = b"data: [DONE]\n\n"


def test_whole_events_pass_through_unchanged() -> None:
    guard = StreamGuard()
    assert guard.feed(ONE + TWO) == ONE + TWO
    assert guard.feed(DONE) == DONE
    assert guard.finish() == b""


def test_an_event_split_across_chunks_is_held_back_until_whole() -> None:
    guard = StreamGuard()
    assert guard.feed(ONE + TWO[:7]) == ONE
    assert guard.feed(TWO[7:-1]) == b""
    assert guard.feed(TWO[-1:] + DONE) == TWO + DONE


def test_crlf_event_ends_count_too() -> None:
    guard = StreamGuard()
    first = ONE.replace(b"\n\n", b"\r\n\r\n")
    assert guard.feed(first + b"data: {") == first
    assert guard.feed(b"}\r\n\r\n") == b"data: {}\r\n\r\n"


def test_an_event_that_is_not_json_is_an_error() -> None:
    guard = StreamGuard()
    with pytest.raises(UpstreamError) as caught:
        guard.feed(ONE + b'data: {"choices": [{"del\n\n')
    assert caught.value.code == "upstream_malformed"


def test_a_stream_ending_halfway_through_an_event_is_an_error() -> None:
    guard = StreamGuard()
    assert guard.feed(ONE + TWO[:10]) == ONE
    with pytest.raises(UpstreamError):
        guard.finish()


def test_comments_and_keepalives_are_not_events() -> None:
    guard = StreamGuard()
    assert guard.feed(b": keep-alive\n\n" + ONE) == b": keep-alive\n\n" + ONE
    assert guard.feed(b": trailing") == b""
    assert guard.finish() == b": trailing"


def test_json_bodies_and_content_types() -> None:
    assert check_json_body(b'{"a": 1}') is None
    error = check_json_body(b'{"a": ')
    assert error is not None and error.code == "upstream_malformed"
    assert is_event_stream({"content-type": "text/event-stream; charset=utf-8"})
    assert is_event_stream({"Content-Type": "text/event-stream"})
    assert not is_event_stream({"content-type": "application/json"})


def test_a_last_event_without_its_blank_line_passes_as_it_came() -> None:
    guard = StreamGuard()
    assert guard.feed(ONE + b"data: [DONE]\n") == ONE
    assert guard.finish() == b"data: [DONE]\n"


def test_an_event_that_never_ends_is_an_error_once_over_the_bound() -> None:
    guard = StreamGuard()
    piece = b"data: " + b"x" * (1024 * 1024)
    assert guard.feed(ONE + piece) == ONE
    with pytest.raises(UpstreamError) as caught:
        for _ in range(MAX_EVENT_BYTES // len(piece) + 1):
            assert guard.feed(piece) == b""
    assert caught.value.code == "upstream_malformed"
    assert str(MAX_EVENT_BYTES) in caught.value.message


def test_an_event_up_to_the_bound_passes_whole() -> None:
    guard = StreamGuard()
    event = b'data: "' + b"x" * (MAX_EVENT_BYTES - 16) + b'"\n\n'
    half = len(event) // 2
    assert guard.feed(event[:half]) == b""
    assert guard.feed(event[half:]) == event


class _Sink:
    def __init__(self) -> None:
        self.events: list[tuple[bytes, Any]] = []

    def event(self, payload: bytes, parsed: Any) -> None:
        self.events.append((payload, parsed))

    def done(self) -> None:
        self.events.append((b"[DONE]", None))

    def end(self, tail: bytes) -> None:
        pass


_FIELD = st.sampled_from([b"event: ", b"event:", b"id: ", b": note ", b"retry: "])
_DATA = st.sampled_from([b"data: ", b"data:"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(_FIELD, st.sampled_from([b"x", b"response.created", b""]))),
            st.sampled_from([[], [b"{}"], [b'{"a": 1}'], [b'{"a":', b"[2]}"], [b"[1]"]]).flatmap(
                lambda lines: st.tuples(*[st.tuples(_DATA, st.just(line)) for line in lines]).map(
                    list
                )
            ),
        ),
        max_size=6,
    ),
    st.lists(st.integers(min_value=1, max_value=40), max_size=6),
)
def test_named_events_hand_the_sink_what_the_decoder_reads(
    events: list[tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]], cuts: list[int]
) -> None:
    # Any mix of fields before an event's data lines, in chunks cut anywhere: the guard
    # hands its sink each event's data as the spec's decoder reads it (named events with
    # one data line take the guard's own fast path).
    stream = b"".join(
        b"\n".join([name + value for name, value in fields] + [p + d for p, d in data]) + b"\n\n"
        for fields, data in events
        if fields or data
    )
    sink = _Sink()
    guard = StreamGuard(sink)
    out, start = b"", 0
    for cut in [*cuts, len(stream)]:
        out += guard.feed(stream[start : start + cut])
        start += cut
    out += guard.feed(stream[start:])
    assert out + guard.finish() == stream
    expected = SSEDecoder().feed(stream)
    assert [payload for payload, _ in sink.events] == expected
    assert [parsed for _, parsed in sink.events] == [orjson.loads(p) for p in expected]


def test_a_named_event_that_is_not_json_is_an_error() -> None:
    guard = StreamGuard()
    with pytest.raises(UpstreamError) as caught:
        guard.feed(b'event: response.created\ndata: {"type": "resp\n\n')
    assert caught.value.code == "upstream_malformed"


_EVENTS = st.sampled_from(
    [
        b"data: {}",
        b'data:{"a": 1}',
        b"data: [DONE]",
        b"data:[DONE]",
        b"event: done\ndata: [DONE]",
        b"id: 3\ndata: [DONE]",
        b": keep-alive",
        b'data: {"a":\ndata: 2}',
        b'data: "[DONE]"',  # a JSON string, not the end
        b"event: e\ndata: {}",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_EVENTS, max_size=8),
    st.sampled_from([b"\n", b"\r\n"]),
    st.sampled_from([b"", b"\n", b"  \n", b"not an event", b"data: {}\n\n"]),
    st.lists(st.integers(min_value=1, max_value=30), max_size=6),
)
def test_the_stream_ends_at_its_first_done_however_it_is_cut(
    events: list[bytes], line_end: bytes, trailer: bytes, cuts: list[int]
) -> None:
    # Whatever the events, line ends and cuts: the guard forwards the stream up to the end
    # of its first [DONE] event (as done_end finds it in the whole stream), hands its sink
    # what the spec's decoder reads of that much, and notes anything but blank lines after.
    stream = b"".join(event.replace(b"\n", line_end) + line_end * 2 for event in events)
    stream += trailer
    lf_stream = stream.replace(b"\r\n", b"\n")
    done_at = done_end(lf_stream)
    sink = _Sink()
    guard = StreamGuard(sink)
    out, start = b"", 0
    for cut in cuts:
        out += guard.feed(stream[start : start + cut])
        start += cut
    out += guard.feed(stream[start:])
    if done_at is None:
        try:
            out += guard.finish()
        except UpstreamError:
            return  # the trailer cut an event midway: refused, as it should be
        assert out == stream
        assert not guard.is_over
        return
    # The same events with CRLF line ends end at the same place, in CRLF bytes.
    forwarded = stream[: len(lf_stream[:done_at].replace(b"\n", line_end))]
    out += guard.finish()
    if out != forwarded and out + b"\n" == forwarded:
        # A cut between a CRLF's two halves: its CR already ended the line (the SSE spec),
        # so the [DONE] event ended there and the LF after it is past the stream's end.
        forwarded = out
    assert out == forwarded
    assert guard.is_over
    assert guard.has_extra == bool(stream[len(forwarded) :].strip())
    assert [payload for payload, _ in sink.events] == SSEDecoder().feed(forwarded)

"""The pure half of fleet coalescing: stream entries and whole-event framing."""

from __future__ import annotations

from hasten.errors import RelayedError, UpstreamTimeout
from hasten.fleet import relay


def test_entries_round_trip() -> None:
    fields = relay.start_fields(0, 200, {"content-type": "text/event-stream"}, "sim", 12.5)
    entry = relay.decode_entry(dict(zip((b"k", b"n", b"d", b"u"), fields, strict=True)))
    assert entry.kind == relay.START and entry.seq == 0
    head = relay.decode_head(entry.data)
    assert (head.status, head.headers, head.upstream_name, head.ttfb_ms) == (
        200,
        {"content-type": "text/event-stream"},
        "sim",
        12.5,
    )
    chunk = relay.chunk_fields(3, b"data: x\n\n", 1)
    entry = relay.decode_entry(dict(zip((b"k", b"n", b"d", b"u"), chunk, strict=True)))
    assert (entry.kind, entry.seq, entry.data, entry.num_usage_events) == (
        relay.CHUNK,
        3,
        b"data: x\n\n",
        1,
    )


def test_end_entry_carries_the_error_as_clients_saw_it() -> None:
    assert relay.decode_error(relay.end_fields(5, None)[2]) is None
    data = relay.end_fields(5, UpstreamTimeout("too slow", code="upstream_total_timeout"))[2]
    error = relay.decode_error(data)
    assert isinstance(error, RelayedError)
    assert (error.status_code, error.error_type, error.code, error.message) == (
        504,
        "timeout_error",
        "upstream_total_timeout",
        "too slow",
    )


def test_framer_holds_back_a_partial_event() -> None:
    framer = relay.Framer()
    assert framer.feed(b"data: 1\n\ndata: 2") == b"data: 1\n\n"
    assert framer.rest == b"data: 2"
    assert framer.feed(b"\n\ndata: 3\r\n\r\n") == b"data: 2\n\ndata: 3\r\n\r\n"
    assert framer.rest == b""


def test_is_whole_stream() -> None:
    assert relay.is_whole_stream([b"data: {}\n\n", b"data: [DONE]\n\n"])
    assert not relay.is_whole_stream([b"data: {}\n\n"])

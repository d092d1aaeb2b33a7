"""The pure half of fleet coalescing: stream entries and whole-event framing."""

from __future__ import annotations

from hasten.errors import HastenError, RelayedError, UpstreamTimeout
from hasten.fleet import relay
from hasten.proxy.flight import Flight


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


def _entry(kind: bytes, seq: int, data: bytes) -> relay.Entry:
    return relay.Entry(kind, seq, data)


def _head(status: int = 200) -> bytes:
    return relay.start_fields(0, status, {"content-type": "text/event-stream"}, "up", 3.0)[2]


FRAMES = [
    b'data: {"id":"a","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"id":"a","choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"id":"a","choices":[{"index":0,"delta":{"content":" world"}}]}\n\n',
    b'data: {"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def test_feed_pushes_whole_events_only() -> None:
    flight = Flight()
    feed = relay.Feed(flight, None, is_sse=True, endpoint="chat")
    raw = b"".join(FRAMES)
    assert not feed.take(_entry(relay.START, 0, _head()))
    assert flight.is_started and flight.status == 200 and flight.upstream_name == "up"
    cut = raw.index(b"Hello") + 2
    assert not feed.take(_entry(relay.CHUNK, 1, raw[:cut]))
    assert b"".join(flight.chunks) == FRAMES[0]  # the half event is held back
    assert not feed.take(_entry(relay.CHUNK, 2, raw[cut:]))
    assert feed.take(_entry(relay.END, 3, b""))
    assert b"".join(flight.chunks) == raw and flight.is_done and flight.error is None


def test_feed_holds_a_json_body_until_its_end() -> None:
    flight = Flight()
    feed = relay.Feed(flight, None, is_sse=False, endpoint="chat")
    feed.take(_entry(relay.START, 0, _head()))
    feed.take(_entry(relay.CHUNK, 1, b'{"ok":'))
    feed.take(_entry(relay.CHUNK, 2, b"true}"))
    assert not flight.is_started and not flight.chunks  # a takeover could start afresh
    assert feed.take(_entry(relay.END, 3, b""))
    assert flight.is_started and b"".join(flight.chunks) == b'{"ok":true}'
    assert flight.error is None


def test_an_unreadable_end_entry_is_an_error() -> None:
    error = relay.decode_error(b"not json")
    assert isinstance(error, RelayedError) and error.status_code == 502


def test_feed_splices_after_what_the_flight_has() -> None:
    flight = Flight()
    flight.start(200, {}, "up", 1.0)
    for frame in FRAMES[:2]:
        flight.push(frame)
    feed = relay.Feed(flight, None, is_sse=True, endpoint="chat")
    feed.take(_entry(relay.START, 0, _head()))
    regenerated = b"".join(FRAMES).replace(b'"a"', b'"b"')
    feed.take(_entry(relay.CHUNK, 1, regenerated))
    assert feed.take(_entry(relay.END, 2, b""))
    whole = b"".join(flight.chunks)
    assert flight.error is None and whole.count(b"Hello") == 1 and b" world" in whole
    assert whole.endswith(b"data: [DONE]\n\n") and whole.count(b'"role"') == 1


def test_feed_ends_cleanly_when_the_new_text_differs() -> None:
    flight = Flight()
    flight.start(200, {}, "up", 1.0)
    for frame in FRAMES[:2]:
        flight.push(frame)
    feed = relay.Feed(flight, None, is_sse=True, endpoint="chat")
    feed.take(_entry(relay.START, 0, _head()))
    other = b"".join(FRAMES).replace(b"Hello", b"Howdy")
    assert feed.take(_entry(relay.CHUNK, 1, other))
    assert flight.error is not None and flight.error.code == "resume_mismatch"
    assert b"Howdy" not in b"".join(flight.chunks)


def test_feed_refuses_another_status_after_a_start() -> None:
    flight = Flight()
    flight.start(200, {}, "up", 1.0)
    feed = relay.Feed(flight, None, is_sse=True, endpoint="chat")
    assert feed.take(_entry(relay.START, 0, _head(500)))
    assert flight.error is not None and flight.error.code == "resume_mismatch"


def test_feed_relays_the_leaders_error() -> None:
    flight = Flight()
    feed = relay.Feed(flight, None, is_sse=True, endpoint="chat")
    feed.take(_entry(relay.START, 0, _head()))
    error = relay.end_fields(1, UpstreamTimeout("slow", code="upstream_total_timeout"))[2]
    assert feed.take(_entry(relay.END, 1, error))
    assert isinstance(flight.error, RelayedError) and flight.error.status_code == 504


def test_a_relayed_answer_is_bounded_as_an_upstream_one() -> None:
    """A follower holds of a leader's answer at most the route's max_answer_bytes: a leader
    with a larger cap, or anything else writing the stream, cannot make it hold more."""
    for is_sse, piece in ((True, FRAMES[0]), (False, b"[" + b"1," * 512)):
        flight = Flight()
        feed = relay.Feed(flight, None, is_sse=is_sse, endpoint="chat", max_bytes=4096)
        assert not feed.take(_entry(relay.START, 0, _head()))
        seq = 1
        while not feed.take(_entry(relay.CHUNK, seq, piece)):
            seq += 1
            assert seq < 10_000
        assert flight.is_done and flight.error is not None
        assert flight.error.code == "upstream_too_large"
        assert sum(len(chunk) for chunk in flight.chunks) <= 4096


def test_an_event_that_never_ends_is_refused_by_the_framer() -> None:
    framer = relay.Framer()
    framer.feed(b'data: {"x": "')
    try:
        for _ in range(17):
            framer.feed(b"y" * 1024 * 1024)
    except HastenError as exc:
        assert exc.code == "upstream_malformed"
    else:
        raise AssertionError("an endless event was held")

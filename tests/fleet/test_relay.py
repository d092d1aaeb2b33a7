"""The pure half of fleet coalescing: stream entries, whole-event framing, the splice."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hasten.errors import RelayedError, SpliceMismatch, UpstreamTimeout
from hasten.fleet import relay
from hasten.proxy.sse import SSEDecoder


def _frame(event: dict[str, Any] | str) -> bytes:
    data = event.encode() if isinstance(event, str) else orjson.dumps(event)
    return b"data: " + data + b"\n\n"


def _chunk(
    content: str | None, *, ident: str = "a", role: bool = False, finish: str | None = None
) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _frame({"id": ident, "created": 1 if ident == "a" else 2, "choices": [choice]})


def _answer(words: list[str], ident: str) -> list[bytes]:
    usage = {"id": ident, "created": 0, "choices": [], "usage": {"total_tokens": len(words)}}
    return [
        _chunk("", ident=ident, role=True),
        *(_chunk(w, ident=ident) for w in words),
        _chunk(None, ident=ident, finish="stop"),
        _frame(usage),
        _frame("[DONE]"),
    ]


def _text(stream: bytes) -> str:
    text = ""
    for payload in SSEDecoder().feed(stream):
        if payload == b"[DONE]":
            continue
        for choice in orjson.loads(payload)["choices"]:
            text += choice["delta"].get("content") or ""
    return text


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


def test_splice_continues_after_what_was_sent() -> None:
    words = ["One", " two", " three", " four", " five"]
    first, second = _answer(words, "a"), _answer(words, "b")
    for cut in range(len(first) - 1):
        sent = b"".join(first[:cut])
        splice = relay.Splice(sent)
        out = b"".join(frame for data in second for frame in splice.feed(data))
        splice.finish()
        whole = sent + out
        assert _text(whole) == "".join(words), cut
        payloads = [p for p in SSEDecoder().feed(whole) if p != b"[DONE]"]
        # One answer: the first answer's id throughout, one role, one usage chunk.
        if cut:
            assert {orjson.loads(p)["id"] for p in payloads} == {"a"}
        assert sum(b'"role"' in p for p in payloads) == 1
        assert sum(b'"usage"' in p for p in payloads) == 1
        assert whole.endswith(b"data: [DONE]\n\n")


def test_splice_cuts_inside_an_event_when_chunking_differs() -> None:
    sent = b"".join(_answer(["Hello wor"], "a")[:2])
    splice = relay.Splice(sent)
    out = b"".join(
        frame for data in _answer(["Hel", "lo world", "!"], "b") for frame in splice.feed(data)
    )
    assert _text(sent + out) == "Hello world!"


def test_splice_refuses_a_different_text() -> None:
    sent = b"".join(_answer(["One", " two"], "a")[:3])
    splice = relay.Splice(sent)
    with pytest.raises(SpliceMismatch):
        for data in _answer(["One", " three"], "b"):
            splice.feed(data)


def test_splice_refuses_a_shorter_answer() -> None:
    sent = b"".join(_answer(["One", " two", " three"], "a")[:4])
    splice = relay.Splice(sent)
    with pytest.raises(SpliceMismatch):
        for data in _answer(["One"], "b"):
            splice.feed(data)
        splice.finish()


def test_splice_refuses_several_choices() -> None:
    two = {
        "id": "a",
        "choices": [{"index": 0, "delta": {"content": "x"}}, {"index": 1, "delta": {}}],
    }
    with pytest.raises(SpliceMismatch):
        relay.Splice(_frame(two))


def test_splice_with_the_whole_answer_sent_knows_it() -> None:
    assert relay.Splice(b"".join(_answer(["x"], "a"))).is_complete
    assert not relay.Splice(b"".join(_answer(["x"], "a")[:-1])).is_complete

"""Incremental SSE framing and OpenAI chunk inspection of hasten bench."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.sse import DONE, SSEParser, inspect_chunk

payloads = st.lists(
    st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    min_size=0,
    max_size=12,
)


def encode(events: list[bytes], newline: bytes) -> bytes:
    return b"".join(b"data: " + event + newline + newline for event in events)


@given(payloads, st.sampled_from([b"\n", b"\r\n"]), st.lists(st.integers(0, 10_000)))
def test_any_split_yields_the_same_events(
    events: list[bytes], newline: bytes, cuts: list[int]
) -> None:
    stream = encode(events, newline)
    positions = sorted({cut % (len(stream) + 1) for cut in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *positions], [*positions, len(stream)], strict=True)]
    parser = SSEParser()
    received = [event for piece in pieces for event in parser.feed(piece)]
    received += parser.close()
    assert received == events


def test_comments_fields_and_multiline_data() -> None:
    parser = SSEParser()
    stream = b": keep-alive\n\nevent: message\nid: 7\ndata: a\ndata:b\n\ndata: [DONE]\n\n"
    assert parser.feed(stream) == [b"a\nb", DONE]
    assert parser.close() == []


def test_close_flushes_an_unterminated_event() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.close() == [DONE]


def chunk(**fields: object) -> bytes:
    return orjson.dumps(fields)


def test_inspect_chat_chunks() -> None:
    role_only = inspect_chunk(chunk(choices=[{"delta": {"role": "assistant", "content": ""}}]))
    assert not role_only.has_content
    text = inspect_chunk(chunk(choices=[{"delta": {"content": "Hi"}}]))
    assert text.has_content
    assert not text.is_error
    usage = inspect_chunk(chunk(choices=[], usage={"completion_tokens": 9}))
    assert (usage.has_content, usage.completion_tokens) == (False, 9)


def test_inspect_completion_and_error_chunks() -> None:
    assert inspect_chunk(chunk(choices=[{"text": "x", "index": 0}])).has_content
    assert inspect_chunk(chunk(error={"message": "boom"})).is_error
    assert inspect_chunk(b"not json").is_error
    assert inspect_chunk(b"[1, 2]").is_error

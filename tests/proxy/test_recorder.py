"""Recorder (hasten.proxy.recorder): listening to the guard's events records what decoding
the forwarded bytes records: the same answer, and the same usage events counted per chunk."""

from __future__ import annotations

import random
from typing import cast

import orjson
import pytest

from hasten.cache import TieredCache
from hasten.cache.replay import body_to_chunks, sse_frames
from hasten.errors import UpstreamError
from hasten.proxy.recorder import Recorder
from hasten.upstream.integrity import StreamGuard

_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 5,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello there", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
}
_WHOLE = b"".join(sse_frames(body_to_chunks(orjson.dumps(_ANSWER), "chat"), True))
_USAGE = _WHOLE[_WHOLE.rindex(b"data: {") : _WHOLE.rindex(b"data: [DONE]")]
_ERROR = b'data: {"error":{"message":"x"}}\n\n'
_TWO = {
    **_ANSWER,
    "choices": [
        {**_ANSWER["choices"][0], "index": 0},  # type: ignore[index]
        {**_ANSWER["choices"][0], "index": 1},  # type: ignore[index]
    ],
}
_WHOLE_TWO = b"".join(sse_frames(body_to_chunks(orjson.dumps(_TWO), "chat"), True))
_EXTRA = b'data: {"choices":[{"index":0,"delta":{"content":"more"}}]}\n\n'
STREAMS = {
    "whole": _WHOLE,
    "crlf": _WHOLE.replace(b"\n", b"\r\n"),
    "usage_twice": _WHOLE.replace(b"data: [DONE]", _USAGE + b"data: [DONE]"),
    "usage_early": _USAGE + _WHOLE,
    "no_done": _WHOLE.replace(b"data: [DONE]\n\n", b""),
    "error_event": _WHOLE.replace(
        b"data: [DONE]", b'data: {"error":{"message":"x"}}\n\ndata: [DONE]'
    ),
    "done_without_blank_line": _WHOLE[:-1],
    "comments": b": hi\n\n" + _WHOLE,
    # Issue 41: ended with [DONE], yet cut short (a choice without its finish_reason).
    "no_finish_reason": _WHOLE.replace(b'"finish_reason":"stop"', b'"finish_reason":null'),
    "one_choice_unfinished": _WHOLE_TWO.replace(
        b'"finish_reason":"stop"', b'"finish_reason":null', 1
    ),
    "two_choices": _WHOLE_TWO,
    # Events after [DONE]: the guard stops there; the answer before it is kept, not them.
    "events_after_done": _WHOLE + _EXTRA,
    "not_json": _WHOLE.replace(b"data: [DONE]", b"data: {nope\n\ndata: [DONE]"),
}


STORED = {
    "whole",
    "crlf",
    "usage_twice",
    "usage_early",
    "comments",
    "two_choices",
    "events_after_done",
}
NUM_USAGE_COUNTED = {"error_event": 0, "not_json": 0}


def _recorder() -> Recorder:
    return Recorder(cast(TieredCache, None), "k", "chat", True, ttl_s=60.0)


def _record(pieces: list[bytes], *, is_listening: bool) -> tuple[list[int], object]:
    recorder = _recorder()
    guard = StreamGuard(recorder.listen() if is_listening else None)
    counts = []
    try:
        for piece in pieces:
            if data := guard.feed(piece):
                counts.append(recorder.feed(data))
        if tail := guard.finish():
            counts.append(recorder.feed(tail))
    except UpstreamError:
        return counts, None  # refused by the guard: nothing is stored
    answer = recorder.answer()
    return counts, None if answer is None else answer.chunks


def test_events_after_done_are_neither_forwarded_nor_kept() -> None:
    _, kept = _record([STREAMS["events_after_done"]], is_listening=True)
    _, whole = _record([_WHOLE], is_listening=True)
    assert kept == whole
    guard = StreamGuard()
    assert guard.feed(_WHOLE + _EXTRA) == _WHOLE and guard.has_extra
    assert guard.feed(_EXTRA) == b"" and guard.finish() == b""


def test_what_the_recorder_keeps_is_the_forwarded_chunks_themselves() -> None:
    recorder = _recorder()
    guard = StreamGuard(recorder.listen())
    chunk = guard.feed(_WHOLE)
    recorder.feed(chunk)
    assert recorder._parts[0] is chunk  # held once: the flight's own object, not a copy


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_listening_records_what_decoding_the_bytes_records(name: str) -> None:
    stream = STREAMS[name]
    rng = random.Random(name)
    for _ in range(25):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 5)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _record(pieces, is_listening=True) == _record(pieces, is_listening=False)
    counts, chunks = _record([stream], is_listening=True)
    assert (chunks is not None) is (name in STORED)
    # Only a chunk's last two events are looked at (the usage chunk comes last but [DONE]).
    assert sum(counts) == NUM_USAGE_COUNTED.get(name, 1)


def test_a_non_stream_recorder_does_not_listen() -> None:
    recorder = Recorder(cast(TieredCache, None), "k", "chat", False, ttl_s=60.0)
    assert recorder.listen() is None
    recorder.feed(orjson.dumps(_ANSWER))
    answer = recorder.answer()
    assert answer is not None and answer.body == orjson.dumps(_ANSWER)

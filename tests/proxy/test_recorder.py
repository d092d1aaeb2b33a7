"""Recorder (hasten.proxy.recorder): listening to the guard's events records what decoding
the forwarded bytes records: the same answer, and the same usage events counted per chunk."""

from __future__ import annotations

import random
from typing import cast

import orjson
import pytest

from hasten.cache import TieredCache
from hasten.cache.replay import body_to_chunks, sse_frames
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
}


STORED = {"whole", "crlf", "usage_twice", "usage_early", "comments"}
NUM_USAGE_COUNTED = {"error_event": 0}


def _recorder() -> Recorder:
    return Recorder(cast(TieredCache, None), "k", "chat", True, ttl_s=60.0)


def _record(pieces: list[bytes], *, is_listening: bool) -> tuple[list[int], object]:
    recorder = _recorder()
    guard = StreamGuard(recorder.listen() if is_listening else None)
    counts = []
    for piece in pieces:
        if data := guard.feed(piece):
            counts.append(recorder.feed(data))
    if tail := guard.finish():
        counts.append(recorder.feed(tail))
    answer = recorder.answer()
    return counts, None if answer is None else answer.chunks


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

"""Token counts from the tail of an answer."""

from __future__ import annotations

from hasten.metrics.usage import usage_tokens


def test_json_body_usage() -> None:
    body = (
        b'{"choices":[{"message":{"content":"\\"usage\\""}}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":11,"total_tokens":18}}'
    )
    assert usage_tokens(body) == (7, 11)


def test_stream_tail_takes_the_last_usage_event() -> None:
    tail = (
        b'data: {"choices":[{"delta":{"content":"x"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens": 3, "completion_tokens": 5}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert usage_tokens(tail) == (3, 5)


def test_embeddings_have_no_output_tokens_and_no_usage_means_none() -> None:
    assert usage_tokens(b'{"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}') == (4, None)
    assert usage_tokens(b'{"choices":[]}') == (None, None)
    assert usage_tokens(b"") == (None, None)


def test_completion_tokens_first_is_read_too() -> None:
    body = b'{"usage":{"completion_tokens":9,"prompt_tokens":2}}'
    assert usage_tokens(body) == (2, 9)

"""Token counts from the tail of an answer."""

from __future__ import annotations

import pytest

from hasten.values.usage import usage_tokens


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


@pytest.mark.parametrize(
    "count",
    [b"1" + b"0" * 5000 + b"e-4999", b"1" + b"0" * 400 + b"e-399", b"10.0", b"1e3", b"9" * 16],
)
def test_a_count_that_is_no_sane_integer_is_unknown(count: bytes) -> None:
    # Valid JSON numbers all (orjson reads the first two as 10.0): int() of the digits would
    # raise, or make a number too big for the float sums the metrics keep.
    body = b'{"usage":{"prompt_tokens":' + count + b',"completion_tokens":' + count + b"}}"
    assert usage_tokens(body) == (None, None)
    mixed = b'{"usage":{"prompt_tokens":' + count + b',"completion_tokens":7}}'
    assert usage_tokens(mixed) == (None, 7)


def test_the_largest_count_read_is_fifteen_digits() -> None:
    body = b'{"usage":{"prompt_tokens":999999999999999,"completion_tokens":0}}'
    assert usage_tokens(body) == (999_999_999_999_999, 0)

"""Token counts mapped between the three APIs' usage objects, cached tokens included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hasten.apis.usage import (
    MAX_COUNT,
    Usage,
    from_chat,
    from_messages,
    from_responses,
    read_count,
    to_chat,
    to_messages,
    to_responses,
)


def test_read_count_takes_only_plain_integers_of_15_digits() -> None:
    assert read_count(12) == 12
    assert read_count(0) == 0
    assert read_count(MAX_COUNT) == MAX_COUNT
    for bad in (True, 1.0, -1, MAX_COUNT + 1, "12", None, 10**5000):
        assert read_count(bad) is None


def test_chat_usage_with_cached_and_written_tokens() -> None:
    usage = from_chat(
        {
            "prompt_tokens": 2000,
            "completion_tokens": 30,
            "total_tokens": 2030,
            "prompt_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 64},
        }
    )
    assert usage == Usage(2000, 30, 1536, 64)
    assert usage.uncached_input_tokens == 400 and usage.total_tokens == 2030


def test_chat_usage_with_anthropic_names_at_the_top() -> None:
    usage = from_chat(
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "cache_read_input_tokens": 80,
            "cache_creation_input_tokens": 10,
        }
    )
    assert usage == Usage(100, 5, 80, 10)


def test_messages_input_tokens_exclude_the_cache() -> None:
    # Anthropic: total input = input_tokens + cache_read + cache_creation.
    usage = from_messages(
        {
            "input_tokens": 12,
            "cache_read_input_tokens": 1024,
            "cache_creation_input_tokens": 300,
            "output_tokens": 7,
        }
    )
    assert usage == Usage(1336, 7, 1024, 300)
    assert to_messages(usage) == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 1024,
        "output_tokens": 7,
    }
    chat = to_chat(usage)
    assert chat["prompt_tokens"] == 1336
    assert chat["prompt_tokens_details"] == {"cached_tokens": 1024, "cache_write_tokens": 300}
    responses = to_responses(usage)
    assert responses["input_tokens"] == 1336
    assert responses["input_tokens_details"]["cached_tokens"] == 1024


def test_a_message_delta_keeps_counts_it_leaves_out() -> None:
    start = from_messages({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1})
    assert start == Usage(100, 1, 90, 0)
    end = from_messages({"output_tokens": 42}, start)
    assert end == Usage(100, 42, 90, 0)
    assert from_messages(None, start) is start
    assert from_messages({}, None) is None


def test_no_counts_is_no_usage() -> None:
    assert from_chat({"foo": 1}) is None
    assert from_chat("usage") is None
    assert from_responses({"input_tokens": "many"}) is None


counts = st.integers(min_value=0, max_value=10**9)


@given(counts, counts, counts, counts)
def test_every_api_round_trips_every_count(
    uncached: int, output: int, read: int, written: int
) -> None:
    usage = Usage(uncached + read + written, output, read, written)
    assert from_chat(to_chat(usage)) == usage
    assert from_responses(to_responses(usage)) == usage
    assert from_messages(to_messages(usage)) == usage

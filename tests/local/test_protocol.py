"""Unit tests for hasten.local.protocol: the chat request the engine accepts."""

from __future__ import annotations

import pytest

from hasten.errors import InvalidRequest
from hasten.local.protocol import parse_chat_request
from hasten.local.sampling import SamplingParams


def test_parse_chat_request_reads_sampling_fields() -> None:
    request = parse_chat_request(
        {
            "model": "local",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "temperature": 0,
            "top_p": 0.5,
            "max_tokens": 7,
            "stop": "x",
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert request.messages == [{"role": "user", "content": "hi"}]
    assert request.sampling == SamplingParams(0.0, 0.5, 7, ("x",), 3)
    assert request.is_stream and request.includes_usage


@pytest.mark.parametrize(
    "change",
    [
        {"messages": []},
        {"temperature": 3},
        {"top_p": 0},
        {"max_tokens": 0},
        {"stop": ["a", "b", "c", "d", "e"]},
        {"n": 2},
        {"seed": "x"},
        {"messages": [{"role": "robot", "content": "x"}]},
    ],
)
def test_parse_chat_request_rejects_bad_fields(change: dict[str, object]) -> None:
    body = {"model": "local", "messages": [{"role": "user", "content": "hi"}], **change}
    with pytest.raises(InvalidRequest):
        parse_chat_request(body)

"""Unit tests for hasten.simulator.streaming: the order and timing of streamed events."""

from __future__ import annotations

from hasten.simulator.generation import generate_choices
from hasten.simulator.inputs import parse_completion_request
from hasten.simulator.latency import LatencyPlan
from hasten.simulator.payloads import ChatStreamEncoder
from hasten.simulator.streaming import stream_schedule


def test_stream_schedule_orders_role_tokens_finish_usage() -> None:
    request = parse_completion_request({"model": "m", "prompt": "hi", "n": 2, "max_tokens": 3})
    choices = generate_choices(request, 16, None)
    encoder = ChatStreamEncoder("id", 0, "m", include_usage=True, num_choices=2)
    plan = LatencyPlan(first_token_ms=10, decode_ms_per_token=2)
    events = list(stream_schedule(encoder, choices, plan, {"prompt_tokens": 1}))
    assert [b'"role"' in data for _, data, _ in events[:2]] == [True, True]
    assert sum(num_tokens for _, _, num_tokens in events) == 6
    due = [due_ms for due_ms, _, _ in events]
    assert due == sorted(due) and due[0] == 10 and due[-1] == 14
    assert b'"finish_reason":"length"' in events[-2][1] and b'"choices":[]' in events[-1][1]

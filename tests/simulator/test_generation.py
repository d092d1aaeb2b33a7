"""Unit tests for hasten.simulator.generation: how many tokens, and the choices generated."""

from __future__ import annotations

from hasten.simulator.generation import generate_choices, target_num_tokens
from hasten.simulator.inputs import parse_chat_request


def test_target_num_tokens_precedence() -> None:
    assert target_num_tokens(16, None, None) == (16, False)
    assert target_num_tokens(16, 5, None) == (5, True)
    assert target_num_tokens(16, None, 3) == (3, False)
    assert target_num_tokens(16, 5, 3) == (3, False)
    assert target_num_tokens(16, 5, 9) == (5, True)


def test_generation_honours_n_max_tokens_and_stop() -> None:
    request = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 4}
    )
    choices = generate_choices(request, 16, None)
    assert len(choices) == 3
    assert all(len(c.pieces) == 4 and c.finish_reason == "length" for c in choices)
    first_word = choices[0].pieces[1].strip()
    stopped = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": [first_word]}
    )
    assert generate_choices(stopped, 16, None)[0].finish_reason == "stop"

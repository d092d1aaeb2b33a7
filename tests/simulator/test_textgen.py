"""Unit tests for hasten.simulator.textgen: deterministic text, stop sequences, prompt tokens
and embeddings."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.simulator.textgen import (
    chat_prompt_tokens,
    embedding_vector,
    generate_pieces,
    seed_material,
    truncate_at_stop,
)


@given(text=st.text(max_size=200), seed=st.integers(min_value=0, max_value=10**9))
@settings(max_examples=50)
def test_generated_text_is_deterministic(text: str, seed: int) -> None:
    material = seed_material("m", text.encode(), seed, 0)
    assert generate_pieces(material, 20) == generate_pieces(material, 20)
    assert len(generate_pieces(material, 200)) == 200


def test_different_prompts_seeds_and_choices_give_different_text() -> None:
    texts = {
        "".join(generate_pieces(seed_material("m", prompt, seed, index), 16))
        for prompt in (b"a", b"b")
        for seed in (None, 1)
        for index in (0, 1)
    }
    assert len(texts) == 8


def test_pieces_join_into_space_separated_words() -> None:
    pieces = generate_pieces(b"x", 5)
    assert not pieces[0].startswith(" ")
    assert all(piece.startswith(" ") for piece in pieces[1:])
    assert len("".join(pieces).split()) == 5


def test_stop_sequence_cuts_text_before_it() -> None:
    pieces = ["one", " two", " three", " four"]
    assert truncate_at_stop(pieces, [" th"]) == (["one", " two"], True)
    assert truncate_at_stop(pieces, ["hre", "wo"]) == (["one", " t"], True)
    assert truncate_at_stop(pieces, ["nope"]) == (pieces, False)
    assert truncate_at_stop(pieces, ["one"]) == ([], True)


def test_chat_prompt_tokens_mark_roles_and_read_text_parts() -> None:
    messages: list[object] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi there"}, {"type": "image"}]},
        {"role": "assistant", "content": None},
    ]
    assert chat_prompt_tokens(messages) == [
        "<|system|>",
        "be",
        "brief",
        "<|user|>",
        "hi",
        "there",
        "<|assistant|>",
    ]


def test_embeddings_are_unit_length_and_deterministic() -> None:
    vector = embedding_vector("m", "hello", 64)
    assert len(vector) == 64
    assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-9)
    assert vector == embedding_vector("m", "hello", 64)
    assert vector != embedding_vector("m", "hello!", 64)
    assert len(embedding_vector("m", "hello", 300)) == 300

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from hasten.limits.estimate import estimate_prompt_tokens


def _body(text: str, *, is_ascii_escaped: bool = False) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if is_ascii_escaped:
        # \\uXXXX for every non-ASCII character, as json.dumps writes by default
        return json.dumps(body, separators=(",", ":")).encode()
    return orjson.dumps(body)


def test_english_runs_about_four_characters_per_token() -> None:
    overhead = estimate_prompt_tokens(_body(""))
    assert estimate_prompt_tokens(_body("word " * 400)) - overhead == 500


def test_cjk_counts_about_one_token_per_character_raw_or_escaped() -> None:
    overhead = estimate_prompt_tokens(_body(""))
    assert estimate_prompt_tokens(_body("漢" * 300)) - overhead == 300
    assert estimate_prompt_tokens(_body("漢" * 300, is_ascii_escaped=True)) - overhead == 300


@given(st.text(max_size=300), st.text(max_size=300))
def test_the_estimate_is_positive_and_grows_with_the_prompt(a: str, b: str) -> None:
    assert estimate_prompt_tokens(_body(a)) >= 1
    assert estimate_prompt_tokens(_body(a + b)) >= estimate_prompt_tokens(_body(a))

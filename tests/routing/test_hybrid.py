"""Hybrid local/cloud decisions and the ``[hybrid]`` table: pure, no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.config.hybrid import HybridConfig, parse_hybrid
from hasten.config.reader import TomlTable
from hasten.errors import ConfigError
from hasten.routing.hybrid import complexity_score, decide_hybrid


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}


LOCAL_FIRST = HybridConfig(policy="local-first", cloud_model="gpt")


@pytest.mark.parametrize("text", ["What is the capital of France?", "你好，今天怎么样？", "hi"])
def test_easy_questions_go_local_with_cloud_fallback(text: str) -> None:
    decision = decide_hybrid(_chat(text), LOCAL_FIRST)
    assert (decision.target, decision.fallback, decision.reason) == ("local", "cloud", "easy")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (_chat("x", tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        (_chat("x", response_format={"type": "json_schema", "json_schema": {}}), "json-schema"),
        (_chat("x", max_tokens=4096), "max-tokens"),
        (_chat("word " * 3000), "long-context"),
        (_chat("Prove that the square root of 2 is irrational, step by step."), "complex"),
        (_chat("请分析这段代码为什么会死锁"), "complex"),
        (_chat("```python\ndef f(x):\n    return x\n```\nwhy is this slow?"), "complex"),
    ],
)
def test_hard_requests_go_to_the_cloud(body: dict[str, Any], reason: str) -> None:
    decision = decide_hybrid(body, LOCAL_FIRST)
    assert (decision.target, decision.fallback, decision.reason) == ("cloud", "local", reason)


def test_many_turns_escalate() -> None:
    messages = [{"role": "user", "content": "hi"}] * 12
    decision = decide_hybrid({"model": "auto", "messages": messages}, LOCAL_FIRST)
    assert decision.reason == "many-turns"


@pytest.mark.parametrize(
    ("policy", "target", "fallback"),
    [
        ("cloud-first", "cloud", "local"),
        ("local-only", "local", None),
        ("cloud-only", "cloud", None),
    ],
)
def test_fixed_policies_ignore_difficulty(policy: str, target: str, fallback: str | None) -> None:
    config = HybridConfig(policy=policy, cloud_model="gpt")
    for body in (_chat("hi"), _chat("prove it", tools=[{"type": "function"}])):
        decision = decide_hybrid(body, config)
        assert (decision.target, decision.fallback) == (target, fallback)


@given(st.text(max_size=500))
def test_complexity_is_bounded_and_monotone_in_hard_words(text: str) -> None:
    score = complexity_score(text)
    assert 0.0 <= score <= 1.0
    assert complexity_score(text + " prove it") >= score


def test_decision_header_names_target_and_reason() -> None:
    assert decide_hybrid(_chat("hi"), LOCAL_FIRST).header == "local; reason=easy"


# --- the [hybrid] table ---------------------------------------------------------------------

MODELS = {"gpt": object()}


def _parse(table: dict[str, Any], models: dict[str, Any] = MODELS) -> HybridConfig:
    return parse_hybrid(TomlTable(table, "hybrid"), known_models=models)


def test_hybrid_table_keys_and_defaults() -> None:
    assert _parse({"cloud_model": "gpt"}) == HybridConfig(cloud_model="gpt")
    config = _parse(
        {
            "model": "smart",
            "policy": "cloud-first",
            "cloud_model": "gpt",
            "max_local_prompt_tokens": 100,
            "max_local_output_tokens": 50,
            "max_local_turns": 2,
            "max_complexity": 0.5,
            "cloud_first_token_timeout_s": 1,
        }
    )
    assert config == HybridConfig("smart", "cloud-first", "gpt", 100, 50, 2, 0.5, 1)
    assert _parse({"policy": "local-only"}).cloud_model == ""  # no cloud side needed
    assert _parse({"cloud_model": "any"}, {"*": object()}).cloud_model == "any"
    # The limits have always taken a float too, kept as written.
    assert _parse({"cloud_model": "gpt", "max_local_turns": 2.5}).max_local_turns == 2.5


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"policy": "fast"}, "hybrid.policy: expected one of local-first, cloud-first"),
        ({"policy": "cloud-first"}, "hybrid.cloud_model: required for policy 'cloud-first'"),
        ({"cloud_model": "nope"}, "hybrid.cloud_model: unknown model 'nope'"),
        ({"cloud_model": "gpt", "model": "gpt"}, "hybrid.model: 'gpt' is also a [models] route"),
        ({"cloud_model": 3}, "hybrid.cloud_model: expected a string, got int 3"),
        (
            {"cloud_model": "gpt", "max_local_turns": 0},
            "hybrid.max_local_turns: expected a number > 0",
        ),
        (
            {"cloud_model": "gpt", "max_complexity": -1},
            "hybrid.max_complexity: expected a number > 0",
        ),
        (
            {"cloud_model": "gpt", "max_complexity": True},
            "hybrid.max_complexity: expected an integer",
        ),
        ({"cloud_model": "gpt", "modle": "x"}, "hybrid.modle: unknown key (known: "),
    ],
)
def test_hybrid_table_errors_name_their_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(table)
    assert str(info.value).startswith(message), str(info.value)

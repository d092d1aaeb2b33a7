"""Hybrid local/cloud decisions: pure, no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.routing.hybrid import HybridConfig, complexity_score, decide_hybrid


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

"""Hybrid routing: answer easy requests with the local model, send hard ones to the cloud.

Pure logic: ``decide_hybrid`` looks only at the request body and the policy. The caller
turns the decision into an ordered list of upstreams (the second entry is the fallback).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hasten.config.hybrid import HybridConfig

Target = Literal["local", "cloud"]

# Rough characters per token across English and Chinese; only used for thresholds.
_CHARS_PER_TOKEN = 3.0
_HARD_WORDS = re.compile(
    r"\b(prove|proof|derive|analy[sz]e|compare|contrast|step[- ]by[- ]step|explain why|"
    r"trade-?offs?|design|architecture|refactor|debug|optimi[sz]e|implement|algorithm|"
    r"complexity|theorem|evaluate|critique|summari[sz]e)\b"
    r"|证明|推导|分析|比较|对比|逐步|一步一步|为什么|设计|架构|重构|调试|优化|实现|算法|复杂度|评估|总结",
    re.IGNORECASE,
)
_CODE = re.compile(r"```|\bdef |\bclass |\bfunction\b|#include|=>|;\s*$", re.MULTILINE)
_MATH = re.compile(r"\\frac|\\sum|\\int|\$[^$]+\$|[∑∫√≤≥≠]|\d+\s*[*/^]\s*\d+")


@dataclass(frozen=True, slots=True)
class HybridDecision:
    target: Target
    fallback: Target | None
    reason: str

    @property
    def header(self) -> str:
        return f"{self.target}; reason={self.reason}"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def complexity_score(text: str) -> float:
    """0 for a short plain question, rising towards 1 with length, code, maths and asks
    that need reasoning (in English or Chinese)."""
    # Any one strong signal (a reasoning ask, code, maths) crosses the default bar of 0.3;
    # length alone does so past about 1,500 characters.
    score = min(len(text) / 5000.0, 0.4)
    if _HARD_WORDS.search(text):
        score += 0.4
    if _CODE.search(text):
        score += 0.4
    if _MATH.search(text):
        score += 0.35
    return min(score, 1.0)


def hard_reason(body: Mapping[str, Any], config: HybridConfig) -> str | None:
    """Why a request is too hard for the local model, or None when it is easy."""
    if body.get("tools") or body.get("functions"):
        return "tools"
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        return "json-schema"
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > config.max_local_output_tokens:
        return "max-tokens"
    messages = body.get("messages")
    texts = (
        [_text_of(m.get("content")) for m in messages if isinstance(m, dict)]
        if isinstance(messages, list)
        else [str(body.get("prompt", ""))]
    )
    if len(texts) > config.max_local_turns:
        return "many-turns"
    if sum(len(t) for t in texts) / _CHARS_PER_TOKEN > config.max_local_prompt_tokens:
        return "long-context"
    if texts and complexity_score(texts[-1]) > config.max_complexity:
        return "complex"
    return None


def decide_hybrid(body: Mapping[str, Any], config: HybridConfig) -> HybridDecision:
    """Where this request goes first, and where it falls back to."""
    if config.policy == "local-only":
        return HybridDecision("local", None, "local-only")
    if config.policy == "cloud-only":
        return HybridDecision("cloud", None, "cloud-only")
    if config.policy == "cloud-first":
        return HybridDecision("cloud", "local", "cloud-first")
    reason = hard_reason(body, config)
    if reason is None:
        return HybridDecision("local", "cloud", "easy")
    return HybridDecision("cloud", "local", reason)


def route_name(model: str, target: Target) -> str:
    """The route behind a hybrid model name for one side: ``<model>@local`` or ``@cloud``."""
    return f"{model}@{target}"

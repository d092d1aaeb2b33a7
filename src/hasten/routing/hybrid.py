"""Hybrid routing: answer easy requests with the local model, send hard ones to the cloud.

Pure logic: ``decide_hybrid`` looks only at the request body and the policy. The caller
turns the decision into an ordered list of upstreams (the second entry is the fallback).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from hasten.errors import ConfigError

Target = Literal["local", "cloud"]
POLICIES = ("local-first", "cloud-first", "local-only", "cloud-only")

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
class HybridConfig:
    """When a request counts as hard, and what each policy does with it."""

    model: str = "auto"  # the name clients ask for to get hybrid routing
    policy: str = "local-first"
    cloud_model: str = ""  # a configured model route; its name is what both sides receive
    max_local_prompt_tokens: int = 1500
    max_local_output_tokens: int = 512
    max_local_turns: int = 8
    max_complexity: float = 0.3
    cloud_first_token_timeout_s: float = 3.0


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


def parse_hybrid(table: Mapping[str, Any], *, known_models: Mapping[str, Any]) -> HybridConfig:
    """Reads ``[hybrid]``; the cloud side must name a configured model route."""
    defaults = HybridConfig()
    values: dict[str, Any] = {}
    for item in fields(HybridConfig):
        if item.name not in table:
            continue
        value, default = table[item.name], getattr(defaults, item.name)
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(default, str) and not isinstance(value, str):
            raise ConfigError(f"hybrid.{item.name}: expected a string, got {value!r}")
        if isinstance(default, int | float) and not (is_number and value > 0):
            raise ConfigError(f"hybrid.{item.name}: expected a number > 0, got {value!r}")
        values[item.name] = value
    unknown = sorted(set(table) - {item.name for item in fields(HybridConfig)})
    if unknown:
        raise ConfigError(f"hybrid: unknown key {unknown[0]!r}")
    config = HybridConfig(**values)
    if config.policy not in POLICIES:
        raise ConfigError(
            f"hybrid.policy: expected one of {', '.join(POLICIES)}, got {config.policy!r}"
        )
    if config.policy != "local-only":
        if not config.cloud_model:
            raise ConfigError(f"hybrid.cloud_model: required for policy {config.policy!r}")
        if config.cloud_model not in known_models and "*" not in known_models:
            raise ConfigError(f"hybrid.cloud_model: unknown model {config.cloud_model!r}")
    if config.model in known_models:
        raise ConfigError(f"hybrid.model: {config.model!r} is also a [models] route")
    return config

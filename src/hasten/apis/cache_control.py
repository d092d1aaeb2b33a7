"""Anthropic prompt-cache breakpoints for a Messages request that set none (pure).

Anthropic caches a prompt's prefix only up to a block marked ``cache_control``, and an
agent that sets none pays full price and full latency for its long, stable prefix (tools,
system prompt, the history) on every call. ``with_breakpoints`` marks, when the client
marked nothing: the last tool, the last system block, and the last block of the turn before
the final user message (the end of the history the next call will resend), each only where
the prefix up to it reaches Anthropic's minimum cacheable length, and never more than
Anthropic's 4 breakpoints. No ``ttl`` is set: the default (5 minutes) is the one every
Anthropic model accepts.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import orjson

from hasten.apis.messages import MAX_CACHE_BREAKPOINTS, count_cache_breakpoints

# Anthropic's smallest cacheable prefix (1,024 tokens for most models; 2,048 or 4,096 for
# some): below it a breakpoint is ignored, and it would only use up one of the four.
MIN_CACHEABLE_TOKENS = 1024
_CHARS_PER_TOKEN = 4  # a prefix's length is estimated from its JSON, conservatively
_EPHEMERAL = {"type": "ephemeral"}


def with_breakpoints(
    body: Mapping[str, Any], *, min_tokens: int = MIN_CACHEABLE_TOKENS
) -> dict[str, Any] | None:
    """``body`` with cache breakpoints added, or None when it keeps its own (the client set
    some) or no prefix is long enough to cache."""
    if count_cache_breakpoints(body) > 0:
        return None
    marked = copy.deepcopy(dict(body))
    min_chars = min_tokens * _CHARS_PER_TOKEN
    size = 0
    num_marks = 0
    tools = marked.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        size += len(orjson.dumps(tools))
        if size >= min_chars:
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
            num_marks += 1
    system = marked.get("system")
    if isinstance(system, str) and system:
        marked["system"] = system = [{"type": "text", "text": system}]
    if isinstance(system, list) and system and isinstance(system[-1], dict):
        size += len(orjson.dumps(system))
        if size >= min_chars:
            system[-1]["cache_control"] = dict(_EPHEMERAL)
            num_marks += 1
    stable = _last_stable_block(marked.get("messages"))
    if stable is not None and num_marks < MAX_CACHE_BREAKPOINTS:
        messages, index = stable
        size += len(orjson.dumps(messages[: index + 1]))
        if size >= min_chars:
            _mark_last_block(messages[index])
            num_marks += 1
    return marked if num_marks else None


def _last_stable_block(messages: Any) -> tuple[list[Any], int] | None:
    """The message before the final user turn: what the next call resends unchanged."""
    if not isinstance(messages, list) or len(messages) < 2:
        return None
    index = len(messages) - 2
    return (messages, index) if isinstance(messages[index], dict) else None


def _mark_last_block(message: dict[str, Any]) -> None:
    content = message.get("content")
    if isinstance(content, str) and content:
        message["content"] = [{"type": "text", "text": content, "cache_control": dict(_EPHEMERAL)}]
        return
    # Thinking blocks take no breakpoint.
    if (
        isinstance(content, list)
        and content
        and isinstance(content[-1], dict)
        and content[-1].get("type") not in ("thinking", "redacted_thinking")
    ):
        content[-1]["cache_control"] = dict(_EPHEMERAL)

"""Split a chat request into what must match exactly and the one turn that may match loosely.

Only the final user turn is compared by meaning. Everything else that shapes the answer
(resolved model, tenant, system prompt, earlier turns, tools, response format, sampling
parameters) goes into the partition key, so a follow-up such as "how old is she?" can only ever
meet answers given in the very same conversation context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from hasten.cache.request_key import cache_key

# Bump when the partition's form changes so stale partitions can never match new requests.
# The marker also keeps partition keys disjoint from exact-cache keys of the same body.
# Version 2: the text is kept as sent (version 1 made whitespace runs single spaces, so
# "a  b" and "a b", or code indented otherwise, were one question): rows of version 1
# are never matched again and leave with their TTL.
_PARTITION_MARKER = "$hasten_semantic_partition"
_PARTITION_VERSION = 2
# Blank lines before the first line with text: never meaning (the first line's own
# indentation may be: code's, or Markdown's code block).
_LEADING_BLANK_LINES = re.compile(r"\A(?:[^\S\n]*\n)+")
# Long prompts are documents, not questions: a near-duplicate document with one changed
# paragraph embeds almost identically, so they are never matched by meaning.
_MAX_TEXT_CHARS = 2000


@dataclass(frozen=True, slots=True)
class SemanticQuery:
    """The exact-match part (``partition_key``) and the text compared by meaning."""

    partition_key: str
    text: str


def split_chat(body: Mapping[str, Any], *, model: str, tenant: str) -> SemanticQuery | None:
    """The partition key and final user text of a chat body; None when it is not cacheable
    by meaning (no messages, last turn not from the user, non-text content, too long)."""
    messages = body.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return None
    content = last.get("content")
    text = _user_text(content)
    if text is None or not text or len(text) > _MAX_TEXT_CHARS:
        return None
    # The exact-cache key of the body with the last turn's text taken out: the same canonical
    # form (key order, 0 vs 0.0, transport fields ignored) as the exact cache. Parts keep
    # everything but their text, and its length: ["ab", "c"] and ["a", "bc"] stay apart.
    last_rest = {name: value for name, value in last.items() if name != "content"}
    if not isinstance(content, str):
        parts = cast(Sequence[Mapping[str, Any]], content)  # checked by _user_text
        last_rest["content"] = [_without_text(part) for part in parts]
    context = dict(body)
    context["messages"] = [*messages[:-1], last_rest]
    context[_PARTITION_MARKER] = _PARTITION_VERSION
    key = cache_key(context, endpoint="/v1/chat/completions", model=model, tenant=tenant)
    return SemanticQuery(partition_key=key, text=text)


def trimmed(text: str) -> str:
    """``text`` as a repeat must match it: only trailing whitespace and leading blank lines
    dropped. Nothing else, since nothing else is proven not to change an answer: inner
    whitespace is indentation in code and content in quoted text ("a  b"), and NFKC makes
    "10²" read "102"."""
    return _LEADING_BLANK_LINES.sub("", text.rstrip())


def _user_text(content: Any) -> str | None:
    """Plain text of a user turn; None if it carries anything but text (images, audio, files)."""
    if isinstance(content, str):
        return trimmed(content)
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        return None
    parts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") != "text":
            return None
        value = part.get("text")
        if not isinstance(value, str):
            return None
        parts.append(value)
    return trimmed("\n".join(parts))


def _without_text(part: Mapping[str, Any]) -> dict[str, Any]:
    rest = {name: value for name, value in part.items() if name != "text"}
    return {**rest, "$text_chars": len(part["text"])}

"""Token counts of one answer, the same for every API, and each API's usage object.

The three APIs count input differently, and a translation that copies fields by name gets
cached tokens wrong (litellm#36091: ``cache_read_input_tokens`` always 0 when translated):

    Chat Completions  ``prompt_tokens`` is every input token; ``prompt_tokens_details``
                      has ``cached_tokens`` (read from the provider's prompt cache) and
                      ``cache_write_tokens`` (written to it), both part of prompt_tokens
    Responses         ``input_tokens`` likewise, with ``input_tokens_details.cached_tokens``
                      and ``input_tokens_details.cache_write_tokens``
    Messages          ``input_tokens`` is only the input *not* read from or written to the
                      cache; ``cache_read_input_tokens`` and ``cache_creation_input_tokens``
                      come on top (Anthropic: total input = the sum of the three)

``Usage.input_tokens`` is the total (the OpenAI meaning); the cached and cache-written
counts are parts of it, so a translation in either direction keeps every number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A count is an integer of at most 15 digits, as hasten.values.usage reads them: a bool,
# a float, a negative or a 5000-digit number is no count (it would crash or poison sums).
MAX_COUNT = 10**15 - 1


def read_count(value: object) -> int | None:
    """``value`` as a token count, or None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_COUNT else None


def _count(data: Mapping[str, Any], name: str) -> int:
    return read_count(data.get(name)) or 0


def _details(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    details = data.get(name)
    return details if isinstance(details, Mapping) else {}


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one answer. ``input_tokens`` counts every input token; the cached
    (read from the provider's prompt cache) and cache-creation (written to it) counts are
    parts of it."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Input neither read from nor written to the cache (Anthropic's ``input_tokens``)."""
        return max(
            0, self.input_tokens - self.cached_input_tokens - self.cache_creation_input_tokens
        )


def from_chat(usage: object) -> Usage | None:
    """A Chat Completions ``usage`` object; None if it has no token counts."""
    if not isinstance(usage, Mapping):
        return None
    prompt = read_count(usage.get("prompt_tokens"))
    completion = read_count(usage.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    details = _details(usage, "prompt_tokens_details")
    # Some chat servers fronting Anthropic (LiteLLM) put Anthropic's names at the top.
    cached = read_count(details.get("cached_tokens"))
    if cached is None:
        cached = read_count(usage.get("cache_read_input_tokens"))
    written = read_count(details.get("cache_write_tokens"))
    if written is None:
        written = read_count(usage.get("cache_creation_input_tokens"))
    return Usage(prompt or 0, completion or 0, cached or 0, written or 0)


def to_chat(usage: Usage) -> dict[str, Any]:
    details: dict[str, Any] = {"cached_tokens": usage.cached_input_tokens}
    if usage.cache_creation_input_tokens:
        details["cache_write_tokens"] = usage.cache_creation_input_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": details,
    }


def from_responses(usage: object) -> Usage | None:
    """A Responses ``usage`` object; None if it has no token counts."""
    if not isinstance(usage, Mapping):
        return None
    input_tokens = read_count(usage.get("input_tokens"))
    output_tokens = read_count(usage.get("output_tokens"))
    if input_tokens is None and output_tokens is None:
        return None
    details = _details(usage, "input_tokens_details")
    return Usage(
        input_tokens or 0,
        output_tokens or 0,
        _count(details, "cached_tokens"),
        _count(details, "cache_write_tokens"),
    )


def to_responses(usage: Usage, *, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_creation_input_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def from_messages(usage: object, previous: Usage | None = None) -> Usage | None:
    """An Anthropic ``usage`` object (a message's, or a ``message_delta``'s cumulative one:
    counts it leaves out keep their ``previous`` values); None if it has no counts."""
    if not isinstance(usage, Mapping):
        return previous
    uncached = read_count(usage.get("input_tokens"))
    output = read_count(usage.get("output_tokens"))
    read = read_count(usage.get("cache_read_input_tokens"))
    created = read_count(usage.get("cache_creation_input_tokens"))
    if uncached is None and output is None and read is None and created is None:
        return previous
    if previous is not None:
        if read is None:
            read = previous.cached_input_tokens
        if created is None:
            created = previous.cache_creation_input_tokens
        if uncached is None:
            uncached = previous.uncached_input_tokens
        if output is None:
            output = previous.output_tokens
    read, created = read or 0, created or 0
    return Usage((uncached or 0) + read + created, output or 0, read, created)


def to_messages(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.uncached_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens,
    }

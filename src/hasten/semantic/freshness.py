"""How long an answer stays true: time-sensitive questions get a short TTL or are not cached.

"What is the weather now?" or "今天的金价是多少" has a different answer tomorrow (or in a
minute); serving it from a semantic cache for an hour is a wrong answer. Pure and
deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from hasten.semantic import lexicon


@dataclass(frozen=True, slots=True)
class FreshnessPolicy:
    """TTLs by kind of question (a model's own TTL is the exact cache's: the store takes the
    smaller, ``SemanticCache.insert``'s ``ttl_s``)."""

    default_ttl_s: float = 3600.0
    short_ttl_s: float = 300.0


def ttl_s(text: str, *, policy: FreshnessPolicy) -> float:
    """Seconds an answer to ``text`` may be served by meaning: 0 (do not cache it) when it
    changes within minutes, ``short_ttl_s`` when within a day or so."""
    if lexicon.VOLATILE_WORDS.search(text):
        return 0.0
    if lexicon.SHORT_LIVED_WORDS.search(text):
        return min(policy.default_ttl_s, policy.short_ttl_s)
    return policy.default_ttl_s

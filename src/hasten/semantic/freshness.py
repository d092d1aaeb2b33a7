"""How long an answer stays true: time-sensitive questions get a short TTL or are not cached.

"What is the weather now?" or "今天的金价是多少" has a different answer tomorrow (or in a
minute); serving it from a semantic cache for an hour is a wrong answer. Pure and
deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hasten.semantic import lexicon

STABLE = "stable"
SHORT = "short"
VOLATILE = "volatile"


@dataclass(frozen=True, slots=True)
class FreshnessPolicy:
    """TTLs by kind of question; ``model_ttl_s`` overrides ``default_ttl_s`` per model."""

    default_ttl_s: float = 3600.0
    short_ttl_s: float = 300.0
    is_volatile_cached: bool = False
    model_ttl_s: Mapping[str, float] = field(default_factory=dict)


def classify(text: str) -> str:
    """``volatile`` (changes within minutes), ``short`` (within a day) or ``stable``."""
    if lexicon.VOLATILE_WORDS.search(text):
        return VOLATILE
    if lexicon.SHORT_LIVED_WORDS.search(text):
        return SHORT
    return STABLE


def ttl_s(text: str, *, model: str, policy: FreshnessPolicy) -> float:
    """Seconds an answer to ``text`` may be served by meaning; 0 means do not cache it."""
    base_ttl_s = policy.model_ttl_s.get(model, policy.default_ttl_s)
    kind = classify(text)
    if kind == VOLATILE:
        return min(base_ttl_s, policy.short_ttl_s) if policy.is_volatile_cached else 0.0
    if kind == SHORT:
        return min(base_ttl_s, policy.short_ttl_s)
    return base_ttl_s

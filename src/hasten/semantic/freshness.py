"""How long an answer stays true: time-sensitive questions get a short TTL or are not cached.

"What is the weather now?" or "今天的金价是多少" has a different answer tomorrow (or in a
minute); serving it from a semantic cache for an hour is a wrong answer. Pure and
deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

STABLE = "stable"
SHORT = "short"
VOLATILE = "volatile"

# "live" as in broadcast ("live score", "is it live", "watch the match live"), never the
# verb: on the dev files' 42,575 questions, the bare word matched 217 of 451 volatile ones,
# nearly all "where to live" questions, whose answers do not change by the minute.
_LIVE = (
    r"live(?:[- ](?:[\w'-]+\s+){0,2}?|)"
    r"(?:scores?|stream(?:s|ing)?|results?|updates?|coverage|feeds?|broadcasts?|telecast"
    r"|news|match(?:es)?|games?|blogs?|tv|events?|prices?|rates?|tickers?|data|chat"
    r"|commentary|cams?|webcams?|traffic)"
    r"|(?:is|are|was|go|goes|going|went|gone|be|being)\s+live"
    r"|(?:watch|watching|stream|streaming|broadcast|broadcasting|shown|showing|airing)"
    r"\s+(?:[\w'-]+\s+){0,5}?live"
)
# Answers that change within minutes: never cached.
_VOLATILE = re.compile(
    rf"\b(?:right now|at the moment|currently|{_LIVE}|real[- ]time|this (?:minute|second|hour)"
    r"|weather|forecast|temperature outside|stock price|share price|exchange rate"
    r"|score of (?:the|today)|what time is it|current time|time now|traffic)\b"
    r"|现在|此刻|目前|当前|实时|天气|气温|股价|汇率|比分|几点|路况",
    re.IGNORECASE,
)
# Answers that change within a day or so: cached briefly.
_SHORT = re.compile(
    r"\b(?:now|today|tonight|tomorrow|yesterday|this (?:week|weekend|month|year)|latest"
    r"|newest|recent(?:ly)?|breaking|news|headlines?|prices?|cost today|trending|current"
    r"|upcoming|as of|still open|open now)\b"
    r"|今天|今日|今晚|明天|昨天|本周|这周|本月|今年|最新|最近|新闻|价格|多少钱|热搜|近期",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class FreshnessPolicy:
    """TTLs by kind of question; ``model_ttl_s`` overrides ``default_ttl_s`` per model."""

    default_ttl_s: float = 3600.0
    short_ttl_s: float = 300.0
    is_volatile_cached: bool = False
    model_ttl_s: Mapping[str, float] = field(default_factory=dict)


def classify(text: str) -> str:
    """``volatile`` (changes within minutes), ``short`` (within a day) or ``stable``."""
    if _VOLATILE.search(text):
        return VOLATILE
    if _SHORT.search(text):
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

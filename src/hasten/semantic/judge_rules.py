"""The asynchronous judge's decisions, pure: which near misses are judged, the spend budget,
the one-token prompt and its verdict, and when a fresh answer agrees with the cached one.

A near miss whose calibrated risk is above the serving bound but within ``band`` of it is a
plausible paraphrase: it is answered as a miss now and its pair (asked question, stored
question) is judged in the background (``judge``). Only a "yes" whose fresh answer then
agrees with the cached one (``answers_agree``) turns the pair into a verified alias
(``aliases``). No clock of its own: time is an argument.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import orjson

from hasten.semantic.partition import trimmed

# A minute of spend: the budget is a sliding window of this length.
WINDOW_S = 60.0
# A judgement asks for one token; the prompt is the rest of its cost (about 4 chars a token).
_CHARS_PER_TOKEN = 4
PROMPT_HEAD = (
    "Do these two questions ask for the same answer? Reply with one word, yes or no.\n"
    "Question 1 (JSON string): "
)
_PROMPT_MIDDLE = "\nQuestion 2 (JSON string): "


@dataclass(frozen=True, slots=True)
class JudgeCase:
    """One pair to judge: the asked question and the stored entry it came close to.

    ``tenant`` and ``partition`` are the lookup's (an alias never leaves them); ``model`` the
    request's resolved model (the upstream judge asks it unless a judge model is set);
    ``entry_id``/``answer_key`` name the stored entry, ``risk`` its calibrated risk."""

    tenant: str
    partition: str
    model: str
    asked: str
    stored: str
    entry_id: int
    answer_key: str
    risk: float
    script: str = "latin"

    @property
    def key(self) -> tuple[str, str, str, int]:
        """Identical pairs (one question asked again, or by two clients at once) share one."""
        return (self.tenant, self.partition, self.asked, self.entry_id)


def is_judgeable(risk: float | None, max_risk: float, band: float) -> bool:
    """A near miss worth judging: above the serving bound, but within ``band`` of it."""
    return risk is not None and max_risk <= risk < max_risk + band


@dataclass(frozen=True, slots=True)
class SpendPolicy:
    """Per minute at most ``max_per_minute`` judgements and ``max_tokens_per_minute`` tokens
    (0: no token cap)."""

    max_per_minute: int = 60
    max_tokens_per_minute: int = 0


class SpendBudget:
    """The sliding-minute window of judgements spent (``now`` passed in, seconds)."""

    def __init__(self, policy: SpendPolicy) -> None:
        self.policy = policy
        self._spent: deque[tuple[float, int]] = deque()
        self._num_tokens = 0

    def try_spend(self, now: float, num_tokens: int) -> bool:
        """Spends one judgement of ``num_tokens`` if the last minute leaves room for it."""
        while self._spent and self._spent[0][0] <= now - WINDOW_S:
            self._num_tokens -= self._spent.popleft()[1]
        if len(self._spent) >= self.policy.max_per_minute:
            return False
        max_tokens = self.policy.max_tokens_per_minute
        if max_tokens and self._num_tokens + num_tokens > max_tokens:
            return False
        self._spent.append((now, num_tokens))
        self._num_tokens += num_tokens
        return True

    def correct(self, num_estimated: int, num_used: int) -> None:
        """The upstream's usage replaces the estimate of the latest judgement spent."""
        if not self._spent or num_used < 0:
            return
        at, tokens = self._spent[-1]
        if tokens == num_estimated:
            self._spent[-1] = (at, num_used)
            self._num_tokens += num_used - num_estimated


def prompt(asked: str, stored: str) -> str:
    """The one-token question. The two texts go in as JSON strings, so a question cannot
    close its quote and append instructions of its own."""
    return (
        PROMPT_HEAD
        + orjson.dumps(asked).decode()
        + _PROMPT_MIDDLE
        + orjson.dumps(stored).decode()
        + "\nAnswer:"
    )


def estimated_tokens(asked: str, stored: str) -> int:
    """What one judgement costs, before the upstream reports its usage (prompt + 1 token)."""
    return math.ceil(len(prompt(asked, stored)) / _CHARS_PER_TOKEN) + 1


def parse_verdict(text: str) -> bool | None:
    """``yes`` True, ``no`` False (case, spaces and punctuation aside); anything else None."""
    word = text.strip().strip(".,!\"'`*").lower()
    if word.startswith("yes"):
        return True
    if word.startswith("no"):
        return False
    return None


def normalized_answer(text: str) -> str:
    """An answer's text compared for equality: its ends trimmed (``partition.trimmed``), no
    more: case and inner spacing may be meaning (code, quoted text)."""
    return trimmed(text)


def answers_agree(cached: str, fresh: str, cosine: float | None, min_cosine: float) -> bool:
    """The second key of an alias: the miss's fresh answer against the cached one.

    Equal texts (their ends trimmed) agree: a deterministic upstream gives one answer
    to two phrasings of one question, and answers to different questions are almost never
    word for word equal. Otherwise their embedding cosine must reach ``min_cosine``; it is
    weak evidence on its own (answers on one topic embed close), which is why it only ever
    counts after the judge said yes. ``min_cosine`` above 1 (or ``cosine`` None): equality
    only."""
    if normalized_answer(cached) == normalized_answer(fresh):
        return True
    return cosine is not None and min_cosine <= 1.0 and cosine >= min_cosine

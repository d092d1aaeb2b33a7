"""Scoring what a client saw: pure, so the rules are tested without a network.

- pass: the full correct answer, on time;
- partial: the full correct answer, late (or, over several requests, some of each);
- safe-fail: a clean OpenAI-shaped error (status + ``{"error": {...}}``) or a clean SSE
  error event after correct text, nothing wrong cached, no hang;
- fail: a hang, a traceback or body that is not OpenAI-shaped, a wrong or corrupt answer
  (bytes that are not JSON, a stream that just stops), or a partial answer cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    PASS = "pass"
    PARTIAL = "partial"
    SAFE_FAIL = "safe-fail"
    FAIL = "fail"


_RANK = {Outcome.PASS: 0, Outcome.PARTIAL: 1, Outcome.SAFE_FAIL: 2, Outcome.FAIL: 3}


@dataclass(frozen=True, slots=True)
class Observation:
    """What one client saw of one request."""

    status: int  # 0: no HTTP response
    text: str  # the answer's content so far
    is_complete: bool  # a stream that ended with [DONE]; a whole JSON body with a choice
    error: Mapping[str, object] | None  # the OpenAI error object (body or SSE event)
    problem: str  # "": the bytes were sound; else what was wrong with them (hang, not JSON)
    elapsed_s: float
    headers: Mapping[str, str] = field(default_factory=dict)  # the x-hasten-* ones

    @property
    def cache(self) -> str:
        return self.headers.get("x-hasten-cache", "")


@dataclass(frozen=True, slots=True)
class Expectation:
    """The right answer: exactly ``text``, or (``text`` None) any text that starts with
    ``prefix`` and goes on (a non-deterministic answer continued after a cut)."""

    text: str | None
    prefix: str = ""

    def wrong_because(self, got: str, *, is_whole: bool) -> str:
        """ "" when ``got`` is right (or, not ``is_whole``, a right beginning)."""
        if self.text is not None:
            is_right = got == self.text if is_whole else self.text.startswith(got)
            return "" if is_right else f"wrong text: {got[:60]!r}"
        if is_whole:
            return (
                ""
                if got.startswith(self.prefix) and len(got) > len(self.prefix)
                else (f"text does not continue what was sent: {got[:60]!r}")
            )
        return (
            ""
            if got.startswith(self.prefix) or self.prefix.startswith(got)
            else (f"wrong text: {got[:60]!r}")
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    note: str
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"outcome": str(self.outcome), "note": self.note, "elapsed_s": self.elapsed_s}


def judge(seen: Observation, expected: Expectation, on_time_s: float) -> Verdict:
    """One request's verdict."""
    elapsed_s = seen.elapsed_s
    if seen.problem:
        return Verdict(Outcome.FAIL, seen.problem, elapsed_s)
    if seen.error is not None:
        wrong = expected.wrong_because(seen.text, is_whole=False) if seen.text else ""
        if wrong:
            return Verdict(Outcome.FAIL, f"{wrong} before the error", elapsed_s)
        code = seen.error.get("code") or seen.error.get("type") or "error"
        where = (
            f"SSE error event after {len(seen.text)} chars"
            if seen.status == 200
            else (f"{seen.status}")
        )
        return Verdict(Outcome.SAFE_FAIL, f"{where} ({code})", elapsed_s)
    if seen.status != 200 or not seen.is_complete:
        return Verdict(Outcome.FAIL, f"status {seen.status}, incomplete answer", elapsed_s)
    wrong = expected.wrong_because(seen.text, is_whole=True)
    if wrong:
        return Verdict(Outcome.FAIL, wrong, elapsed_s)
    if elapsed_s > on_time_s:
        return Verdict(Outcome.PARTIAL, f"late: {elapsed_s:.2f} s > {on_time_s:g} s", elapsed_s)
    return Verdict(Outcome.PASS, "", elapsed_s)


def judge_replay(seen: Observation, expected: Expectation) -> Verdict:
    """A re-ask once the faults are gone: whatever answers (the cache, or the upstream
    afresh) must be right; a wrong or broken answer means one was cached."""
    if seen.problem or seen.error is not None or not seen.is_complete:
        reason = seen.problem or "no complete answer"
        return Verdict(Outcome.FAIL, f"re-ask after the fault: {reason}", seen.elapsed_s)
    wrong = expected.wrong_because(seen.text, is_whole=True)
    if wrong:
        source = "cached" if seen.cache == "hit" else "served"
        return Verdict(Outcome.FAIL, f"{source} after the fault: {wrong}", seen.elapsed_s)
    return Verdict(Outcome.PASS, "", seen.elapsed_s)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of several (the first of equals), its note kept."""
    found: Verdict | None = None
    for verdict in verdicts:
        if found is None or _RANK[verdict.outcome] > _RANK[found.outcome]:
            found = verdict
    if found is None:
        raise ValueError("no verdicts")
    return found


def at_least(outcome: Outcome, floor: Outcome) -> bool:
    """True when ``outcome`` is ``floor`` or better."""
    return _RANK[outcome] <= _RANK[floor]

"""What a lookup returns (a match, or a near miss) and how answer classes stop paraphrases
stored after a miss from blocking hits.

The ambiguity rule (``matcher``) refuses a lookup when two close entries have different
answers. Live traffic creates such pairs by itself: Q1 is cached, its paraphrase Q2 lands
just below the cut-off, is answered upstream and stored under its own answer; from then on
every paraphrase near both is refused, and the more paraphrases arrive the fewer hit.

The gateway has the evidence to tell that case from a real conflict: it holds both answers.
So a lookup that serves nothing reports the closest candidate it refused; once the
fresh answer is in, ``SemanticTier`` compares it with that entry's cached answer and, if they
agree, stores the new entry in the near entry's answer class. Entries of one class never
make each other ambiguous. Without that evidence every entry is its own class (its id), so
an insert-only workload (bench/semantic/evaluate.py) decides exactly as before classes existed.
"""

from __future__ import annotations

from dataclasses import dataclass

from hasten.semantic.matcher import Candidate


@dataclass(frozen=True, slots=True)
class SemanticMatch:
    """A cached question close enough to the request.

    ``answer_key`` is the exact-cache key its answer was stored under.
    """

    entry_id: int
    similarity: float
    answer_key: str
    risk: float | None = None  # calibrated chance the answer is wrong (precision-first mode)
    script: str = ""


@dataclass(frozen=True, slots=True)
class LookupResult:
    """``match``: as ``SemanticCache.lookup`` returns it. ``near``: when nothing is served,
    the closest entry whose answer the fresh one should be compared with, if any is within
    the candidate floor."""

    match: SemanticMatch | None = None
    near: Candidate | None = None


NOTHING = LookupResult()

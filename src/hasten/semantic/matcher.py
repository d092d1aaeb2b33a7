"""Which cached question, if any, answers a new one: threshold, near-miss guard, ambiguity.

Pure: it sees candidates (already found by the index and read from the store) and decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hasten.semantic.guard import TextSignature, compare

# Decision reasons, reported in stats and logs.
HIT = "hit"
NO_CANDIDATE = "no_candidate"
BELOW_THRESHOLD = "below_threshold"
GUARD = "guard"
AMBIGUOUS = "ambiguous"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored question near the query.

    ``answer_class``: entries whose answers were seen to agree share one (see ``near``);
    an entry nobody joined is its own class (its id).
    """

    entry_id: int
    similarity: float
    signature: TextSignature
    answer_key: str
    answer_class: int


@dataclass(frozen=True, slots=True)
class MatchPolicy:
    """``min_similarity``: cosine cut-off (depends on the embedder's score range).

    Ambiguity: two stored questions with different answers that are both close to the query
    mean the cache once judged them different (or their answers disagreed), so it cannot know
    which one the query means. The best is served only if no other answer qualifies and its
    cosine distance is clearly smaller than the runner-up's (``max_distance_ratio``, as in
    Lowe's ratio test for matching image features). A runner-up in the best's answer class
    is no conflict: its answer was seen to agree, so either would be served correctly.
    """

    min_similarity: float
    max_distance_ratio: float = 0.9
    # Error-budget mode serves below the static cut-off: say where "qualifies" starts there.
    qualifying_similarity: float | None = None


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision; ``candidate`` is the best guard-passing candidate even on a miss."""

    reason: str
    candidate: Candidate | None = None
    guard_reason: str | None = None

    @property
    def is_hit(self) -> bool:
        return self.reason == HIT


def choose(query: TextSignature, candidates: Sequence[Candidate], policy: MatchPolicy) -> Choice:
    """The candidate to serve, or why none is served. Candidates may come in any order."""
    ordered = sorted(candidates, key=lambda item: (-item.similarity, item.entry_id))
    compatible: list[Candidate] = []
    first_guard_reason: str | None = None
    for candidate in ordered:
        reason = compare(query, candidate.signature)
        if reason is None:
            compatible.append(candidate)
        elif first_guard_reason is None and candidate.similarity >= policy.min_similarity:
            first_guard_reason = reason
    if not compatible:
        if first_guard_reason is not None:
            return Choice(GUARD, guard_reason=first_guard_reason)
        return Choice(NO_CANDIDATE if not ordered else BELOW_THRESHOLD)
    best = compatible[0]
    if best.similarity < policy.min_similarity:
        return Choice(BELOW_THRESHOLD, best)
    runner_up = next((c for c in compatible[1:] if _conflicts(best, c)), None)
    if runner_up is not None and (
        runner_up.similarity >= (policy.qualifying_similarity or policy.min_similarity)
        or not is_unambiguous(best.similarity, runner_up.similarity, policy.max_distance_ratio)
    ):
        return Choice(AMBIGUOUS, best)
    return Choice(HIT, best, guard_reason=first_guard_reason)


def _conflicts(best: Candidate, other: Candidate) -> bool:
    return other.answer_key != best.answer_key and other.answer_class != best.answer_class


def is_unambiguous(best: float, runner_up: float, max_distance_ratio: float) -> bool:
    """Whether the best cosine is clearly closer than the runner-up's (strictly)."""
    return (1.0 - best) < max_distance_ratio * (1.0 - runner_up)

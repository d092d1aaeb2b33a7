"""Which cached question, if any, answers a new one: near-miss guard, then either the
calibrated risk (the default: ``calibration``) or a cosine cut-off with the ambiguity test.

Pure: it sees candidates (already found by the index and read from the store) and decides;
a lookup returns the ``SemanticMatch`` served, or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hasten.semantic.calibration import Calibration, Evidence, evidence, script_of
from hasten.semantic.guard import TextSignature, compare

# Decision reasons, reported in stats and logs.
HIT = "hit"
NO_CANDIDATE = "no_candidate"
BELOW_THRESHOLD = "below_threshold"
GUARD = "guard"
AMBIGUOUS = "ambiguous"
RISKY = "risky"  # calibrated: the chance of a wrong answer is above the operator's tolerance
# Calibrated, where only a repeated question can be served (``MatchPolicy.serves_only_repeats``)
# and none is stored: decided from the text, without an embedding.
NOT_REPEATED = "not_repeated"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored question near the query."""

    entry_id: int
    similarity: float
    signature: TextSignature
    answer_key: str


@dataclass(frozen=True, slots=True)
class MatchPolicy:
    """``min_similarity``: cosine cut-off (depends on the embedder's score range).

    Ambiguity: two stored questions with different answers that are both close to the query
    mean the cache once judged them different, so it cannot know which one the query means.
    The best is served only if no other answer qualifies and its cosine distance is clearly
    smaller than the runner-up's (``max_distance_ratio``, as in Lowe's ratio test for
    matching image features).
    """

    min_similarity: float
    max_distance_ratio: float = 0.9
    # Where a runner-up "qualifies" when ``min_similarity`` is lowered to see every candidate
    # (bench/semantic/evaluate.py --sweep); None: at ``min_similarity``.
    qualifying_similarity: float | None = None
    # Precision first: with a calibration, a guard-passing best candidate is served when its
    # calibrated risk is below ``max_risk`` (1 - target precision); ``min_similarity`` and
    # the ratio test are then unused (the margin to the runner-up is part of the evidence).
    calibration: Calibration | None = None
    max_risk: float = 0.05

    def serves_only_repeats(self, script: str) -> bool:
        """Whether, in ``script``, no evidence but identical text (``partition.trimmed``) can
        reach the target: then a lookup needs no embedding to decide, only the stored
        questions' texts."""
        calibration = self.calibration
        return calibration is not None and not calibration.can_reach(1.0 - self.max_risk, script)

    @property
    def serves_repeats(self) -> bool:
        """Whether a repeated question is precise enough for the target (calibrated)."""
        calibration = self.calibration
        return calibration is not None and 1.0 - calibration.identical_precision < self.max_risk

    @property
    def floor(self) -> float:
        """The lowest similarity worth reading from the store."""
        if self.calibration is not None:
            return self.calibration.min_similarity
        # At twice the cut-off's distance every runner-up that could fail the ratio test is
        # still seen.
        return self.min_similarity - 2 * (1.0 - self.min_similarity)


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision; ``candidate`` is the best guard-passing candidate even on a miss."""

    reason: str
    candidate: Candidate | None = None
    guard_reason: str | None = None
    risk: float | None = None  # calibrated P(wrong) of ``candidate``, when calibrated
    script: str = ""

    @property
    def is_hit(self) -> bool:
        return self.reason == HIT


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


def choose(query: TextSignature, candidates: Sequence[Candidate], policy: MatchPolicy) -> Choice:
    """The candidate to serve, or why none is served. Candidates may come in any order."""
    ordered = sorted(candidates, key=lambda item: (-item.similarity, item.entry_id))
    compatible: list[Candidate] = []
    first_guard_reason: str | None = None
    lowest = policy.floor if policy.calibration is not None else policy.min_similarity
    for candidate in ordered:
        reason = compare(query, candidate.signature)
        if reason is None:
            compatible.append(candidate)
        elif first_guard_reason is None and candidate.similarity >= lowest:
            first_guard_reason = reason
    script = script_of(query.squashed)
    if not compatible:
        if first_guard_reason is not None:
            return Choice(GUARD, guard_reason=first_guard_reason, script=script)
        return Choice(NO_CANDIDATE if not ordered else BELOW_THRESHOLD, script=script)
    best = compatible[0]
    if policy.calibration is not None:
        risk = policy.calibration.risk(best_evidence(query, best, compatible), script)
        return Choice(HIT if risk < policy.max_risk else RISKY, best, risk=risk, script=script)
    if best.similarity < policy.min_similarity:
        return Choice(BELOW_THRESHOLD, best, script=script)
    runner_up = next((c for c in compatible[1:] if c.answer_key != best.answer_key), None)
    if runner_up is not None and (
        runner_up.similarity >= (policy.qualifying_similarity or policy.min_similarity)
        or (1.0 - best.similarity) >= policy.max_distance_ratio * (1.0 - runner_up.similarity)
    ):
        return Choice(AMBIGUOUS, best, script=script)
    return Choice(HIT, best, guard_reason=first_guard_reason, script=script)


def best_evidence(
    query: TextSignature, best: Candidate, compatible: Sequence[Candidate]
) -> Evidence:
    """What the calibration judges ``best`` by (shared with bench/semantic/calibrate.py)."""
    runner_up = next((c for c in compatible[1:] if c.answer_key != best.answer_key), None)
    return evidence(
        query.squashed,
        best.signature.squashed,
        best.similarity,
        None if runner_up is None else runner_up.similarity,
        is_identical=query.text == best.signature.text,
    )

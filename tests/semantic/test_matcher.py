"""The matcher's calibrated path: the risk decides, the guard still vetoes, and the cosine
path is unchanged when no calibration is given."""

from __future__ import annotations

from hasten.semantic import calibration, matcher
from hasten.semantic.calibration import Calibration, ScriptModel
from hasten.semantic.guard import signature
from hasten.semantic.matcher import Candidate, MatchPolicy

# Risk falls with the cosine and with the margin to another answer.
MODEL = ScriptModel((-2.0, 1.0, 3.0, 0.0, 0.0), ((0.0, 0.0), (0.9, 0.97)), 0.9, 0.05, 0.8)
CALIBRATED = MatchPolicy(1.0, calibration=Calibration("e", {calibration.LATIN: MODEL}))


def _candidate(entry_id: int, similarity: float, text: str, key: str = "") -> Candidate:
    return Candidate(entry_id, similarity, signature(text), key or f"k{entry_id}")


def test_a_clear_best_is_served_with_its_risk() -> None:
    query = signature("how do i cook rice")
    choice = matcher.choose(query, [_candidate(1, 0.97, "how to cook rice")], CALIBRATED)
    assert choice.is_hit and choice.risk is not None and abs(choice.risk - 0.03) < 1e-9
    assert choice.script == calibration.LATIN


def test_a_close_runner_up_with_another_answer_makes_it_risky() -> None:
    query = signature("how do i cook rice")
    close = [_candidate(1, 0.97, "how to cook rice"), _candidate(2, 0.965, "how to cook pasta")]
    choice = matcher.choose(query, close, CALIBRATED)
    assert choice.reason == matcher.RISKY and choice.candidate is not None
    # A runner-up stored under the best's own answer is no conflict.
    same = [close[0], _candidate(2, 0.965, "how to cook pasta", key="k1")]
    assert matcher.choose(query, same, CALIBRATED).is_hit


def test_the_guard_still_vetoes() -> None:
    query = signature("learn python in 3 months")
    choice = matcher.choose(query, [_candidate(1, 0.99, "learn python in 6 months")], CALIBRATED)
    assert choice.reason == matcher.GUARD and choice.guard_reason == "numbers"


def test_without_a_calibration_the_cosine_decides() -> None:
    query = signature("how do i cook rice")
    choice = matcher.choose(query, [_candidate(1, 0.97, "how to cook rice")], MatchPolicy(0.96))
    assert choice.is_hit and choice.risk is None
    assert not matcher.choose(query, [_candidate(1, 0.95, "x rice")], MatchPolicy(0.96)).is_hit
    assert CALIBRATED.floor == 0.8 and abs(MatchPolicy(0.96).floor - 0.88) < 1e-9


def test_identical_text_is_judged_by_its_own_bound() -> None:
    policy = MatchPolicy(
        1.0,
        calibration=Calibration("e", {calibration.LATIN: MODEL}, identical_precision=0.99),
    )
    query = signature("How do I cook rice?")
    # The same question, its ends trimmed: served even below the model's floor.
    same = matcher.choose(query, [_candidate(1, 0.79, "How do I cook rice? ")], policy)
    assert same.is_hit and same.risk is not None and abs(same.risk - 0.01) < 1e-9
    # Case differs: not identical (QQP labels such pairs both ways), so the model decides.
    cased = matcher.choose(query, [_candidate(1, 0.79, "how do i cook rice?")], policy)
    assert cased.reason == matcher.RISKY

"""Calibrated risk: script detection, evidence, the risk models (fitting: bench tests)."""

from __future__ import annotations

import pytest

from hasten.semantic import calibration
from hasten.semantic.calibration import Calibration, Evidence, ScriptModel


def test_script_of_counts_letters() -> None:
    assert calibration.script_of("how do i cook rice") == calibration.LATIN
    assert calibration.script_of("怎么学习python") == calibration.CJK  # 4 of 10 letters Han
    assert calibration.script_of("東京タワーの高さは") == calibration.CJK
    assert calibration.script_of("как выучить python быстро") == calibration.OTHER
    assert calibration.script_of("1 + 1 = ?") == calibration.LATIN


def test_evidence_of_two_texts() -> None:
    same = calibration.evidence("cookrice", "cookrice", 0.99, None, is_identical=True)
    assert same.is_identical and same.overlap == 1.0 and same.margin == calibration.MAX_MARGIN
    other = calibration.evidence("abcd", "abxy", 0.9, 0.88)
    assert not other.is_identical and other.overlap == pytest.approx(1 / 5)
    assert other.margin == pytest.approx(0.02) and other.length_ratio == 1.0
    assert calibration.evidence("ab", "abcd", 0.9, 0.95).margin == 0.0  # runner-up closer


def _model(bins: tuple[tuple[float, float], ...]) -> ScriptModel:
    # Score rises with the cosine only: weight 1 per unit of (s - 0.9) / 0.05.
    return ScriptModel((0.0, 1.0, 0.0, 0.0, 0.0), bins, 0.9, 0.05, 0.85)


def test_risk_reads_the_bin_of_the_score() -> None:
    model = _model(((0.0, 0.2), (0.7, 0.9), (0.85, 0.97)))
    close = Evidence(0.99, 0.1, 0.5, 1.0, False)  # logit 1.8: score 0.86
    middle = Evidence(0.95, 0.1, 0.5, 1.0, False)  # logit 1.0: score 0.73
    assert model.risk(close) == pytest.approx(0.03)
    assert model.risk(middle) == pytest.approx(0.1)
    assert model.risk(Evidence(0.84, 0.1, 1.0, 1.0, True)) == 1.0  # below its floor


def test_a_script_without_a_model_takes_the_highest_risk() -> None:
    latin = _model(((0.0, 0.99),))
    cjk = _model(((0.0, 0.5),))
    both = Calibration("e", {calibration.LATIN: latin, calibration.CJK: cjk})
    item = Evidence(0.95, 0.1, 0.5, 1.0, False)
    assert both.risk(item, calibration.LATIN) == pytest.approx(0.01)
    assert both.risk(item, calibration.OTHER) == pytest.approx(0.5)
    assert both.min_similarity == 0.85

"""Calibrated risk: the chance that serving a semantic candidate gives a wrong answer.

The operator states the precision they need (``[semantic] target_precision``); a raw cosine
cut-off means something different for every embedder and language, and says nothing about
how often it is wrong. So the matcher turns what it already knows about the best candidate
into evidence (``Evidence``: cosine, margin to the nearest candidate with another answer,
character-bigram overlap, length ratio, identical text) and a per-embedder, per-script
``ScriptModel`` maps it to a risk:

1. a logistic model of P(correct | evidence) orders the candidates (a score in 0..1);
   (an identical text is judged by its own measured bound instead);
2. a binned table maps that score to a *lower confidence bound* on the precision measured in
   its bin (Wilson, one-sided 95%), made monotone, so a bin with few examples counts as less
   precise than it looked. risk = 1 - that bound.

A hit is served only when ``risk < 1 - target_precision``. The numbers live in
``calibrated`` (fitted by bench/semantic/calibrate.py); pure arithmetic, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

LATIN = "latin"
CJK = "cjk"
OTHER = "other"
SCRIPTS = (LATIN, CJK, OTHER)

# A query at least this CJK (Han, kana, hangul among its letters) is scored as CJK: mixed
# Chinese questions often carry a Latin product name or code ("python 怎么安装").
_MIN_CJK_SHARE = 0.3
_MIN_LATIN_SHARE = 0.5
# Margins beyond this say nothing more (and a lone candidate gets this margin).
MAX_MARGIN = 0.1


def script_of(text: str) -> str:
    """``cjk``, ``latin`` or ``other``, by the share of each script among the letters."""
    num_letters = num_cjk = num_latin = 0
    for char in text:
        if not char.isalpha():
            continue
        num_letters += 1
        code = ord(char)
        if code < 0x250:
            num_latin += 1
        elif (
            0x3040 <= code <= 0x30FF
            or 0x3400 <= code <= 0x4DBF
            or 0x4E00 <= code <= 0x9FFF
            or 0xAC00 <= code <= 0xD7AF
            or 0xF900 <= code <= 0xFAFF
        ):
            num_cjk += 1
    if num_letters == 0:
        return LATIN  # digits and symbols only: closest to the Latin calibration
    if num_cjk >= _MIN_CJK_SHARE * num_letters:
        return CJK
    return LATIN if num_latin >= _MIN_LATIN_SHARE * num_letters else OTHER


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the matcher knows about its best candidate (all cheap, all already computed)."""

    similarity: float
    margin: float  # to the nearest candidate with another answer (capped at MAX_MARGIN)
    overlap: float  # Jaccard of the two squashed texts' character bigrams
    length_ratio: float  # shorter / longer squashed text
    is_identical: bool  # the same text (``partition.trimmed``)


def evidence(
    query_squashed: str,
    candidate_squashed: str,
    similarity: float,
    runner_up: float | None,
    *,
    is_identical: bool = False,
) -> Evidence:
    """The evidence for one candidate (texts squashed: lower case, no whitespace or hyphens);
    ``runner_up``: similarity of the nearest other answer."""
    margin = MAX_MARGIN if runner_up is None else min(MAX_MARGIN, similarity - runner_up)
    one, two = _bigrams(query_squashed), _bigrams(candidate_squashed)
    union = len(one | two)
    longer = max(len(query_squashed), len(candidate_squashed), 1)
    return Evidence(
        similarity=similarity,
        margin=max(0.0, margin),
        overlap=len(one & two) / union if union else 1.0,
        length_ratio=min(len(query_squashed), len(candidate_squashed)) / longer,
        is_identical=is_identical,
    )


def _bigrams(text: str) -> set[str]:
    return {text[i : i + 2] for i in range(len(text) - 1)} if len(text) > 1 else {text}


def features(item: Evidence, *, center: float, scale: float) -> tuple[float, ...]:
    """The logistic model's inputs (the cosine put on a unit scale around ``center``)."""
    return (
        1.0,
        (item.similarity - center) / scale,
        item.margin / MAX_MARGIN,
        item.overlap,
        item.length_ratio,
    )


@dataclass(frozen=True, slots=True)
class ScriptModel:
    """One embedder's calibration for one script.

    ``weights``: the logistic model over ``features``; ``bins``: (lowest score of the bin,
    lower bound of its precision), scores ascending, bounds non-decreasing. Below
    ``min_similarity`` (the calibration saw no useful candidate there) the risk is 1.
    """

    weights: tuple[float, ...]
    bins: tuple[tuple[float, float], ...]
    center: float
    scale: float
    min_similarity: float

    def score(self, item: Evidence) -> float:
        """P(correct) by the logistic model alone (orders candidates; not yet a bound)."""
        values = features(item, center=self.center, scale=self.scale)
        logit = sum(w * x for w, x in zip(self.weights, values, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, logit))))

    def risk(self, item: Evidence) -> float:
        """The calibrated chance that serving this candidate is wrong (an upper bound)."""
        if item.similarity < self.min_similarity or not self.bins:
            return 1.0
        score = self.score(item)
        bound = 0.0
        for lowest, precision in self.bins:
            if score < lowest:
                break
            bound = precision
        return 1.0 - bound


@dataclass(frozen=True, slots=True)
class Calibration:
    """An embedder's models by script; a script with no model of its own (``other``) is
    scored by every model and the highest risk counts.

    A stored question identical to the query (its ends trimmed; case counts: QQP labels
    "English" / "english" pairs both ways) is judged apart from the models, in every script
    alike (an identical text says nothing about its language): by ``identical_precision``,
    the lower bound measured on such hits.
    """

    embedder: str
    models: Mapping[str, ScriptModel]
    identical_precision: float = 0.0

    @property
    def min_similarity(self) -> float:
        """The lowest cosine any script may serve: candidates below it need not be read."""
        return min(model.min_similarity for model in self.models.values())

    def can_reach(self, precision: float, script: str) -> bool:
        """Whether any non-identical evidence could be judged at least this precise."""
        models = self.models
        chosen = [models[script]] if script in models else list(models.values())
        return bool(chosen) and all(
            model.bins and model.bins[-1][1] > precision for model in chosen
        )

    def risk(self, item: Evidence, script: str) -> float:
        """The calibrated chance that serving the candidate ``item`` describes is wrong."""
        if item.is_identical and self.identical_precision > 0:
            return 1.0 - self.identical_precision
        model = self.models.get(script)
        if model is not None:
            return model.risk(item)
        return max(model.risk(item) for model in self.models.values())

"""Calibrates ``[semantic] target_precision``: fits the per-script risk models of
``hasten.semantic.calibration`` on one part of the dev pairs and checks them on the rest.

    python bench/semantic/calibrate.py [--qqp-limit 10000] [--seed 0] [--target 0.95]

Method (the numbers it prints go to src/hasten/semantic/calibrated.py):
- Every lookup of protocol v2 is simulated exactly as the store decides it: the distinct
  ``a`` texts of a split are the cache, each ``b`` takes its 8 nearest (cosine), the
  near-miss guard drops candidates, and the best survivor's ``Evidence`` (cosine, margin to
  the nearest other answer, bigram overlap, length ratio, identical text) is scored correct
  or not by protocol v2 (``evaluate.verdict``).
- Latin: fitted on a seeded half of a seeded qqp_dev sample; checked on the other half and
  on all of gptcache_mock_pairs. CJK: zh_sts_dev is the only Chinese file, so it is split the
  same way (seeded halves): fitted on one, checked on the other; with about 130 positives a
  half, the CJK table is coarse by construction.
- Per script, an L2-regularised logistic model orders the evidence; isotonic regression of
  the outcomes on its score, pooled into blocks of at least ``--min-per-bin`` lookups, each
  block's precision replaced by its one-sided 95% Wilson lower bound, gives the table.
  A hit is served when 1 - bound < 1 - target, i.e. only in blocks whose *lower bound* clears
  the target: conservative by design, so a held-out set of another source keeps its precision.
Vectors come from bench/semantic/vectors.py's cache (/tmp), so reruns take seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

from bench.semantic import evaluate, fitting
from bench.semantic import vectors as vectors_mod
from hasten.semantic import calibration, matcher
from hasten.semantic.calibration import Calibration, Evidence, ScriptModel
from hasten.semantic.guard import TextSignature, compare, signature

NUM_CANDIDATES = 8
# e5's cosines: unrelated questions sit around 0.75-0.85; the model is fitted from here up.
E5_FLOOR = 0.85
E5_CENTER, E5_SCALE = 0.92, 0.04
L2 = 1.0


@dataclass(frozen=True, slots=True)
class Lookup:
    row: int
    script: str
    evidence: Evidence | None  # None: no guard-passing candidate above the floor
    verdict: str | None
    served: str | None = None  # the stored question of the best candidate


def simulate(
    pairs: Sequence[evaluate.Pair],
    vectors: dict[str, npt.NDArray[np.float32]],
    signatures: dict[str, TextSignature],
    floor: float,
) -> list[Lookup]:
    """Protocol v2 on ``pairs``, decided as the store would up to the risk model."""
    stored = evaluate.stored_questions(pairs)
    matrix = np.stack([vectors[text] for text in stored])
    stored_sigs = [_sig(signatures, text) for text in stored]
    lookups = []
    for row, pair in enumerate(pairs):
        query = _sig(signatures, pair.b)
        sims = matrix @ vectors[pair.b]
        top = np.argpartition(-sims, min(NUM_CANDIDATES, len(stored) - 1))[:NUM_CANDIDATES]
        candidates = [
            matcher.Candidate(int(j), float(sims[j]), stored_sigs[j], f"q-{j}", int(j))
            for j in top
            if sims[j] >= floor
        ]
        ordered = sorted(candidates, key=lambda item: (-item.similarity, item.entry_id))
        compatible = [c for c in ordered if compare(query, c.signature) is None]
        script = calibration.script_of(query.squashed)
        if not compatible:
            lookups.append(Lookup(row, script, None, None))
            continue
        best = compatible[0]
        item = matcher.best_evidence(query, best, compatible)
        verdict = evaluate.verdict(pair, stored[best.entry_id])
        lookups.append(Lookup(row, script, item, verdict, stored[best.entry_id]))
    return lookups


def _sig(signatures: dict[str, TextSignature], text: str) -> TextSignature:
    found = signatures.get(text)
    if found is None:
        found = signatures[text] = signature(text)
    return found


def fit_weights(rows: Sequence[Evidence], ys: Sequence[bool]) -> tuple[float, ...]:
    """MAP logistic regression (Newton), an L2 penalty on all but the intercept."""
    design = np.array([calibration.features(r, center=E5_CENTER, scale=E5_SCALE) for r in rows])
    target = np.array(ys, dtype=np.float64)
    weights = np.zeros(design.shape[1])
    penalty = np.eye(design.shape[1]) * L2
    penalty[0, 0] = 1e-9  # keeps the Hessian invertible
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (p - target) + penalty @ weights
        hessian = (
            design.T @ (design * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(len(weights))
        )
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return tuple(round(float(w), 4) for w in weights)


def fit_model(lookups: Sequence[Lookup], min_per_bin: int, floor: float) -> ScriptModel:
    """The logistic model and its table, from the lookups whose best is not identical text."""
    seen = [item for item in lookups if item.evidence and not item.evidence.is_identical]
    rows = [item.evidence for item in seen if item.evidence is not None]
    ys = [item.verdict == "correct" for item in seen]
    weights = fit_weights(rows, ys)
    unbinned = ScriptModel(weights, (), E5_CENTER, E5_SCALE, floor)
    scores = [unbinned.score(row) for row in rows]
    bins = fitting.isotonic_bins(scores, ys, min_per_bin=min_per_bin)
    rounded = tuple((round(low, 6), round(bound, 4)) for low, bound in bins)
    return ScriptModel(weights, rounded, E5_CENTER, E5_SCALE, floor)


def identical_precision(lookups: Sequence[Lookup]) -> tuple[float, int, int]:
    """Wilson lower bound of the precision of identical-text hits, with its counts."""
    verdicts = [item.verdict for item in lookups if item.evidence and item.evidence.is_identical]
    num_correct = sum(1 for verdict in verdicts if verdict == "correct")
    return (
        round(fitting.wilson_lower(num_correct, len(verdicts)), 4),
        num_correct,
        len(verdicts),
    )


def check(
    pairs: Sequence[evaluate.Pair],
    lookups: Sequence[Lookup],
    model: Calibration,
    target: float,
) -> dict[str, Any]:
    """Protocol-v2 precision and recall of the calibrated decision on ``lookups``."""
    stored = {text.strip() for text in evaluate.stored_questions(pairs)}
    counts = {"correct": 0, "wrong": 0, "false": 0}
    for item in lookups:
        if item.evidence is None or item.verdict is None:
            continue
        if model.risk(item.evidence, item.script) < 1.0 - target:
            counts[item.verdict] += 1
    num_hits = sum(counts.values())
    num_answerable = sum(evaluate.is_answerable(pair, stored) for pair in pairs)
    return {
        "num_pairs": len(pairs),
        "hits": num_hits,
        **counts,
        "precision": round(counts["correct"] / num_hits, 4) if num_hits else 1.0,
        "recall": round(counts["correct"] / max(1, num_answerable), 4),
        "false_hit_rate": round((counts["wrong"] + counts["false"]) / len(pairs), 4),
    }


def _halves(
    pairs: Sequence[evaluate.Pair], seed: int
) -> tuple[list[evaluate.Pair], list[evaluate.Pair]]:
    order = np.random.default_rng(seed).permutation(len(pairs))
    half = len(pairs) // 2
    first = [pairs[i] for i in sorted(order[:half])]
    second = [pairs[i] for i in sorted(order[half:])]
    return first, second


def _source(fitted: Calibration) -> str:
    """The table as Python, for src/hasten/semantic/calibrated.py."""

    def model(m: ScriptModel) -> str:
        return (
            f"ScriptModel(weights={m.weights!r}, bins={m.bins!r}, center={m.center!r},"
            f" scale={m.scale!r}, min_similarity={m.min_similarity!r})"
        )

    models = ", ".join(f"{k!r}: {model(m)}" for k, m in fitted.models.items())
    return (
        f"Calibration(embedder={fitted.embedder!r}, models={{{models}}},"
        f" identical_precision={fitted.identical_precision!r})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--qqp-limit", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--min-per-bin", type=int, default=60)
    args = parser.parse_args()
    limits = {"qqp_dev": args.qqp_limit}
    embedder = vectors_mod.CachedEmbedder("e5", limits=limits)
    vectors: dict[str, npt.NDArray[np.float32]] = {}
    pairs_of = {}
    for dataset in vectors_mod.DATASETS:
        path = vectors_mod.DATA_DIR / f"{dataset}.jsonl"
        pairs_of[dataset] = evaluate.load_pairs(path, limit=limits.get(dataset), seed=0)
        texts = vectors_mod.texts_of(dataset, limits.get(dataset))
        vectors.update(zip(texts, embedder.embed(texts), strict=True))
    signatures: dict[str, TextSignature] = {}
    qqp_fit, qqp_check = _halves(pairs_of["qqp_dev"], args.seed)
    zh_fit, zh_check = _halves(pairs_of["zh_sts_dev"], args.seed)
    sets = {
        "qqp_dev (fit half)": qqp_fit,
        "qqp_dev (check half)": qqp_check,
        "gptcache_mock_pairs": pairs_of["gptcache_mock_pairs"],
        "zh_sts_dev (fit half)": zh_fit,
        "zh_sts_dev (check half)": zh_check,
    }
    simulated = {name: simulate(p, vectors, signatures, E5_FLOOR) for name, p in sets.items()}
    fits = {calibration.LATIN: "qqp_dev (fit half)", calibration.CJK: "zh_sts_dev (fit half)"}
    models = {k: fit_model(simulated[name], args.min_per_bin, E5_FLOOR) for k, name in fits.items()}
    bound, num_correct, num_identical = identical_precision(
        [*simulated["qqp_dev (fit half)"], *simulated["zh_sts_dev (fit half)"]]
    )
    fitted = Calibration(embedder.name, models, identical_precision=bound)

    def checks(target: float) -> dict[str, Any]:
        return {name: check(sets[name], simulated[name], fitted, target) for name in sets}

    report = {
        "embedder": embedder.name,
        "target_precision": args.target,
        "identical_precision": {"bound": bound, "correct": num_correct, "of": num_identical},
        "checks": checks(args.target),
        "other_targets": {str(t): checks(t) for t in (0.8, 0.85, 0.9, 0.97)},
        "source": _source(fitted),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

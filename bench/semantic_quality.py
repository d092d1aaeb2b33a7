"""Semantic-cache quality in one run, on every evaluation file: hasten's default, its
error-budget mode at 0.5%, 1% and 2%, and GPTCache with the same embedder at its thresholds
0.7 / 0.8 / 0.9 / 0.95, with hasten's recall at each GPTCache precision (iso-precision).

    python bench/semantic_quality.py [--limit 2000] [--passes 3]

Protocol of ../shared/data/semcache/README.md (``hasten.semantic.evaluate``); qqp_dev is a
seeded ``--limit`` sample, the other files are whole. Prints one summary line, then JSON.
GPTCache runs in bench/.venvs/gptcache (see bench/semantic.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import semantic as bench

from hasten.semantic import evaluate
from hasten.semantic.embedder import Vectors, build_embedder

BUDGETS = (0.005, 0.01, 0.02)


class MemoEmbedder:
    """Embeds each distinct text once across the runs of this benchmark."""

    def __init__(self, kind: str) -> None:
        self._model = build_embedder(kind)
        self._vectors: dict[str, Vectors] = {}

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def dim(self) -> int:
        return self._model.dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            for text, vector in zip(missing, self._model.embed(missing), strict=True):
                self._vectors[text] = vector
        return np.stack([self._vectors[text] for text in texts])


def _args(pairs_path: Path, limit: int | None, **overrides: Any) -> argparse.Namespace:
    settings: dict[str, Any] = dict(
        pairs=pairs_path, limit=limit, seed=0, embedder="e5", min_similarity=None,
        max_distance_ratio=0.9, error_budget=None, passes=1, sweep=False,
        max_hit_error_rate=0.1,
    )  # fmt: skip
    settings.update(overrides)
    return argparse.Namespace(**settings)


def _budget_row(report: dict[str, Any], budget: float) -> dict[str, Any]:
    passes = report["passes"]
    num_lookups = report["num_pairs"]
    stats = report["cache_stats"]
    return {
        "budget": budget,
        "false_hit_rate_per_pass": [round(p["false_hit_rate"], 4) for p in passes],
        "hit_rate_per_pass": [round(p["hits"] / num_lookups, 4) for p in passes],
        "precision_per_pass": [round(p["precision"], 4) for p in passes],
        "recall_per_pass": [round(p["recall"], 4) for p in passes],
        "is_within_budget": all(p["false_hit_rate"] <= budget for p in passes),
        "verified": stats.get("verified_correct", 0) + stats.get("verified_wrong", 0),
        "verified_wrong": stats.get("verified_wrong", 0),
    }


def _dataset(dataset: str, limit: int | None, passes: int, memo: MemoEmbedder) -> dict[str, Any]:
    path = bench.DATA_DIR / f"{dataset}.jsonl"
    pairs = evaluate.load_pairs(path, limit=limit, seed=0)
    default = asyncio.run(evaluate._run(_args(path, limit, sweep=True), pairs, memo))
    budgets = []
    for budget in BUDGETS:
        args = _args(path, limit, error_budget=budget, passes=passes)
        budgets.append(_budget_row(asyncio.run(evaluate._run(args, pairs, memo)), budget))
    completed = subprocess.run(
        [str(bench.GPTCACHE_PYTHON), bench.__file__, "gptcache-worker", dataset, str(limit or 0)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    theirs = json.loads(completed.stdout.strip().splitlines()[-1])
    side = bench._side_by_side(theirs, default)
    ours_at = {
        t: max((r["recall"] for r in default["sweep"] if r["precision"] >= p["precision"]),
               default=0.0)
        for t, p in theirs["thresholds"].items()
    }  # fmt: skip
    return {
        "num_pairs": len(pairs),
        "hasten_default": default["summary"] | {"min_similarity": default["min_similarity"]},
        "hasten_lookup_ms": default["lookup_ms"],
        "protocol_ceiling": default["protocol_ceiling"],
        "error_budget": budgets,
        "gptcache": {
            t: point | {"hasten_recall_at_this_precision": ours_at[t]}
            for t, point in theirs["thresholds"].items()
        },
        "gptcache_best": side["at_gptcache_points"]["best"],
        "iso_precision_ratios": side["ratio_over_cutoffs_with_gptcache_precision_over_0.5"],
    }


def _summary(report: dict[str, Any]) -> str:
    parts = []
    for dataset, row in report["datasets"].items():
        ours = row["hasten_default"]
        budget = next(b for b in row["error_budget"] if b["budget"] == 0.01)
        best = row["gptcache_best"]
        parts.append(
            f"{dataset}: P {ours['precision']:.3f} R {ours['recall']:.3f}"
            f" | 1% budget fhr {max(budget['false_hit_rate_per_pass']):.4f}"
            f" hits {budget['hit_rate_per_pass'][-1]:.3f}"
            f" | vs GPTCache best P {best['gptcache']['precision']:.3f}: x{best['ratio']}"
        )
    return "semantic quality: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=2000, help="qqp_dev sample size")
    parser.add_argument("--passes", type=int, default=3, help="error-budget lookup passes")
    args = parser.parse_args()
    memo = MemoEmbedder("e5")
    started = time.perf_counter()
    datasets = {
        dataset: _dataset(dataset, args.limit if dataset == "qqp_dev" else None, args.passes, memo)
        for dataset in bench.DATASETS
    }
    report = {"elapsed_s": round(time.perf_counter() - started, 1), "datasets": datasets}
    bench._emit(_summary(report), report)


if __name__ == "__main__":
    main()

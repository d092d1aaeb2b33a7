"""Semantic-cache quality in one run, on every evaluation file: hasten's default
(target_precision 0.95, calibrated), lower targets (0.85, 0.8, 0.7), the old cosine default (0.96),
and GPTCache with the same e5 vectors
(gptcache_env.py; its venv bench/.venvs/gptcache is built on first use): at its default
threshold, and swept, with its best recall at precision >= 0.95.

    python bench/semantic/quality.py [--limit 2000] [--no-gptcache]

Protocol v2 of ../shared/data/semcache/README.md (``hasten.semantic.evaluate``; each result
keeps v1's figures under "v1"); qqp_dev is a seeded ``--limit`` sample, the other files are
whole. Embeddings come from bench/semantic/vectors.py's cache in /tmp (the first run embeds).
Prints one summary line, then JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

from bench.semantic import compare as bench
from bench.semantic import evaluate, gptcache_env
from bench.semantic import vectors as vectors_mod
from bench.support.bench_venv import VenvInstall

# Lower targets, where paraphrases are served (at 0.95 only repeats are).
LOW_TARGETS = (0.85, 0.8, 0.7)


def _args(pairs_path: Path, limit: int | None, **overrides: Any) -> argparse.Namespace:
    settings: dict[str, Any] = dict(
        pairs=pairs_path, limit=limit, seed=0, embedder="e5", min_similarity=None,
        max_distance_ratio=0.9, sweep=False, target_precision=0.95, protocol="v2",
    )  # fmt: skip
    settings.update(overrides)
    return argparse.Namespace(**settings)


def _point(report: dict[str, Any]) -> dict[str, Any]:
    keep = ("precision", "recall", "false_hit_rate", "hits", "correct", "wrong", "false")
    row = {key: report["summary"][key] for key in keep}
    row["v1"] = {key: report["v1"][key] for key in ("precision", "recall")}
    row["by_script"] = report["cache_stats"].get("by_script", {})
    return row


def _dataset(
    dataset: str,
    limit: int | None,
    memo: vectors_mod.CachedEmbedder,
    gptcache: VenvInstall | None,
) -> dict[str, Any]:
    path = bench.DATA_DIR / f"{dataset}.jsonl"
    pairs = evaluate.load_pairs(path, limit=limit, seed=0)
    default = asyncio.run(evaluate._run(_args(path, limit, sweep=True), pairs, memo))
    lower = {
        f"hasten_at_{target}": _point(
            asyncio.run(evaluate._run(_args(path, limit, target_precision=target), pairs, memo))
        )
        for target in LOW_TARGETS
    }
    cosine = asyncio.run(
        evaluate._run(_args(path, limit, min_similarity=0.96, sweep=True), pairs, memo)
    )
    row: dict[str, Any] = {
        "num_pairs": len(pairs),
        "hasten_default": _point(default) | {"target_precision": default["target_precision"]},
        **lower,
        "hasten_cosine_0.96": _point(cosine),
        "hasten_default_risk_sweep": [
            {k: r[k] for k in ("target_precision", "precision", "recall", "hits")}
            for r in default["sweep"]
        ],
        "hasten_lookup_ms": default["lookup_ms"],
    }
    if gptcache is not None and gptcache.executable is not None:
        row["gptcache"] = gptcache_env.compare(pairs, memo, gptcache)
    return row


def _gptcache_summary(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    default = row["default"]
    best = row[f"best_at_precision_{gptcache_env.TARGET_PRECISION}"]
    at_target = "none" if best is None else f"R {best['recall']:.3f} (t {best['threshold']})"
    return (
        f" | GPTCache t {default['threshold']}: P {default['precision']:.3f}"
        f" R {default['recall']:.3f}, at P>=0.95: {at_target}"
    )


def _summary(report: dict[str, Any]) -> str:
    parts = []
    for dataset, row in report["datasets"].items():
        ours = row["hasten_default"]
        at_low = ", ".join(
            f"{t}: P {row[f'hasten_at_{t}']['precision']:.3f}"
            f" R {row[f'hasten_at_{t}']['recall']:.3f}"
            for t in LOW_TARGETS
        )
        parts.append(
            f"{dataset}: P {ours['precision']:.3f} R {ours['recall']:.3f} ({at_low})"
            + _gptcache_summary(row.get("gptcache"))
        )
    return "semantic quality: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=2000, help="qqp_dev sample size")
    parser.add_argument("--no-gptcache", action="store_true", help="skip the GPTCache rows")
    args = parser.parse_args()
    gptcache = None if args.no_gptcache else gptcache_env.ensure_installed()
    if gptcache is not None and gptcache.executable is None:
        print(f"GPTCache rows skipped: {gptcache.reason}; to build its venv by hand:"
              f" python3 -m venv {gptcache_env.VENV.directory} &&"
              f" {gptcache_env.VENV.directory}/bin/pip install"
              f" {' '.join(gptcache_env.VENV.requirements)}", file=sys.stderr)  # fmt: skip
    limits = {"qqp_dev": args.limit}
    memo = vectors_mod.CachedEmbedder("e5", limits=limits)
    started = time.perf_counter()
    datasets = {
        dataset: _dataset(dataset, limits.get(dataset), memo, gptcache)
        for dataset in bench.DATASETS
    }
    report = {
        "elapsed_s": round(time.perf_counter() - started, 1),
        "gptcache_install": None
        if gptcache is None
        else {
            "version": gptcache.version,
            "requirements": list(gptcache_env.VENV.requirements),
            "install_s": gptcache.install_s,
            "reason": gptcache.reason,
        },
        "datasets": datasets,
    }
    bench._emit(_summary(report), report)


if __name__ == "__main__":
    main()

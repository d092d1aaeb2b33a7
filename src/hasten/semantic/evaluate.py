"""``hasten eval-cache PAIRS.jsonl``: precision, recall, false-hit rate and latency of the
semantic cache on labelled question pairs.

Protocol (shared with the benchmarks): every ``a`` goes into an empty cache with a unique
answer, then every ``b`` is looked up. A hit is correct when the label is 1 and the answer of
its own ``a`` came back; wrong when the label is 1 and another row's answer came back; false
when the label is 0. precision = correct / hits, recall = correct / label-1 rows,
false-hit rate = (wrong + false) / lookups. ``--limit N`` evaluates a seeded sample of N pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hasten.semantic.embedder import AsyncEmbedder, Embedder, Vectors, build_embedder
from hasten.semantic.store import SemanticCache
from hasten.semantic.store_config import SemanticStoreConfig

_MODEL = "eval-model"
_TENANT = "eval"
_INSERT_CONCURRENCY = 32
_SWEEP_STEP = 0.0025


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    label: int


@dataclass(slots=True)
class Outcomes:
    """Per lookup: best similarity served (or None) and whether it was the row's own answer."""

    similarities: list[float | None] = field(default_factory=list)
    is_own: list[bool] = field(default_factory=list)
    # A served question that is textually identical to the query (the data repeats questions
    # across rows): counted as wrong by the protocol although the answer fits.
    is_identical: list[bool] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    lookup_ms: list[float] = field(default_factory=list)


def load_pairs(path: Path, *, limit: int | None, seed: int) -> list[Pair]:
    """The pairs of a JSON Lines file; a seeded sample (file order kept) when ``limit`` is set."""
    pairs = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                pairs.append(Pair(str(row["a"]), str(row["b"]), int(row["label"])))
    if limit is not None and limit < len(pairs):
        chosen = np.random.default_rng(seed).choice(len(pairs), limit, replace=False)
        pairs = [pairs[index] for index in sorted(chosen)]
    return pairs


def verbatim_repeats(pairs: Sequence[Pair]) -> dict[str, float]:
    """How far the protocol itself caps precision on ``pairs``.

    A row whose ``b`` is, word for word, the ``a`` of exactly one other row meets that row's
    entry at similarity 1; a cache that answers a repeated question from its entry (as any
    cache should) is then scored wrong or false. With ``n`` such rows and ``p`` positives,
    precision at recall ``r`` is at most ``r*p / (r*p + n)`` whatever the cache does otherwise.
    """
    counts: dict[str, int] = {}
    for pair in pairs:
        counts[pair.a] = counts.get(pair.a, 0) + 1
    num_repeats = sum(1 for pair in pairs if pair.a != pair.b and counts.get(pair.b) == 1)
    num_positive = sum(pair.label for pair in pairs)

    def ceiling(recall: float) -> float:
        num_correct = recall * num_positive
        return round(num_correct / (num_correct + num_repeats), 4) if num_correct else 1.0

    return {
        "num_rows_meeting_a_verbatim_repeat": num_repeats,
        "max_precision_at_recall_0.25": ceiling(0.25),
        "max_precision_at_recall_0.5": ceiling(0.5),
        "max_precision_at_recall_1": ceiling(1.0),
    }


def metrics(outcomes: Outcomes, *, min_similarity: float) -> dict[str, float]:
    """Precision, recall and false-hit rate counting hits at or above ``min_similarity``."""
    num_correct = num_wrong = num_false = num_identical = 0
    for similarity, is_own, is_identical, label in zip(
        outcomes.similarities, outcomes.is_own, outcomes.is_identical, outcomes.labels, strict=True
    ):
        if similarity is None or similarity < min_similarity:
            continue
        num_identical += is_identical and not (label == 1 and is_own)
        if label == 1 and is_own:
            num_correct += 1
        elif label == 1:
            num_wrong += 1
        else:
            num_false += 1
    num_hits = num_correct + num_wrong + num_false
    num_positive = sum(outcomes.labels)
    num_other_hits = num_hits - num_identical
    return {
        "hits": num_hits,
        "correct": num_correct,
        "wrong": num_wrong,
        "false": num_false,
        "precision": num_correct / num_hits if num_hits else 1.0,
        "recall": num_correct / num_positive if num_positive else 0.0,
        "false_hit_rate": (num_wrong + num_false) / max(1, len(outcomes.labels)),
        "wrong_or_false_with_identical_text": num_identical,
        # The same, not counting hits that served a word-for-word identical question.
        "precision_excluding_identical_text": (
            num_correct / num_other_hits if num_other_hits else 1.0
        ),
    }


def sweep(outcomes: Outcomes, *, start: float) -> list[dict[str, float]]:
    """Metrics at every cut-off from ``start`` to 1 (guard and ambiguity already applied)."""
    rows = []
    for cutoff in np.arange(start, 1.0 + 1e-9, _SWEEP_STEP):
        row = {"min_similarity": round(float(cutoff), 4)}
        row.update(metrics(outcomes, min_similarity=float(cutoff)))
        rows.append(row)
    return rows


def _body(text: str) -> dict[str, Any]:
    return {"model": _MODEL, "messages": [{"role": "user", "content": text}]}


async def evaluate(
    pairs: Sequence[Pair], cache: SemanticCache, *, num_passes: int = 1, seed: int = 0
) -> list[Outcomes]:
    """Runs the protocol; several passes only make sense in error-budget mode (learning)."""
    keys = [f"row-{index}" for index in range(len(pairs))]
    for start in range(0, len(pairs), _INSERT_CONCURRENCY):
        await asyncio.gather(
            *(
                cache.insert(_body(pair.a), model=_MODEL, tenant=_TENANT, answer_key=key)
                for pair, key in zip(
                    pairs[start : start + _INSERT_CONCURRENCY],
                    keys[start : start + _INSERT_CONCURRENCY],
                    strict=True,
                )
            )
        )
    passes = []
    order = np.random.default_rng(seed).permutation(len(pairs))
    for _ in range(num_passes):
        outcomes = Outcomes()
        for index in order:
            await _lookup_one(cache, pairs, int(index), keys[index], outcomes)
        passes.append(outcomes)
    return passes


async def _lookup_one(
    cache: SemanticCache, pairs: Sequence[Pair], index: int, key: str, outcomes: Outcomes
) -> None:
    pair = pairs[index]
    started = time.perf_counter()
    await cache.embedder.embed(pair.b)  # remembered: the lookup below reuses the vector
    embedded = time.perf_counter()
    match = await cache.lookup(_body(pair.b), model=_MODEL, tenant=_TENANT)
    finished = time.perf_counter()
    outcomes.embed_ms.append((embedded - started) * 1000)
    outcomes.search_ms.append((finished - embedded) * 1000)
    outcomes.lookup_ms.append((finished - started) * 1000)
    outcomes.labels.append(pair.label)
    is_own = match is not None and match.answer_key == key
    if match is not None and match.is_verification:
        # The oracle: the data's label says whether the cached answer would have been right.
        await cache.report_verification(match, is_correct=is_own and pair.label == 1)
        match = None
    outcomes.similarities.append(None if match is None else match.similarity)
    outcomes.is_own.append(is_own)
    served = -1 if match is None else int(match.answer_key.removeprefix("row-"))
    outcomes.is_identical.append(served >= 0 and pairs[served].a == pair.b)


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0}
    return {
        "p50": round(float(np.percentile(values, 50)), 3),
        "p99": round(float(np.percentile(values, 99)), 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pairs", type=Path, help="JSON Lines of {a, b, label}")
    parser.add_argument("--limit", type=int, default=None, help="seeded sample of N pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--embedder", choices=("e5", "minilm"), default="e5")
    parser.add_argument("--min-similarity", type=float, default=None)
    parser.add_argument("--max-distance-ratio", type=float, default=0.9)
    parser.add_argument("--error-budget", type=float, default=None, help="e.g. 0.01")
    parser.add_argument(
        "--max-hit-error-rate", type=float, default=0.1, help="error budget: per-hit risk cap"
    )
    parser.add_argument("--passes", type=int, default=1, help="lookup passes (error budget)")
    parser.add_argument("--sweep", action="store_true", help="also report every cut-off")


def run(args: argparse.Namespace) -> int:
    pairs = load_pairs(args.pairs, limit=args.limit, seed=args.seed)
    report = asyncio.run(_run(args, pairs))
    summary = report["summary"]
    print(
        f"eval-cache {args.pairs.name}: {len(pairs)} pairs, precision {summary['precision']:.3f}"
        f" recall {summary['recall']:.3f} false-hit rate {summary['false_hit_rate']:.4f}"
        f" lookup p50 {report['lookup_ms']['p50']:.1f} ms (embed {report['embed_ms']['p50']:.1f}"
        f" ms, search {report['search_ms']['p50']:.2f} ms)"
    )
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


async def _run(
    args: argparse.Namespace, pairs: Sequence[Pair], model: Embedder | None = None
) -> dict[str, Any]:
    """One evaluation; ``model`` lets a benchmark share one (memoising) embedder across runs."""
    model = model if model is not None else build_embedder(args.embedder)
    # Remember every text so extra passes (error-budget learning) do not embed again.
    embedder = AsyncEmbedder(model, num_remembered=2 * len(pairs) + 16)
    with tempfile.TemporaryDirectory(prefix="hasten-eval-") as directory:
        config = SemanticStoreConfig(
            path=Path(directory) / "semantic.sqlite3",
            min_similarity=args.min_similarity,
            max_distance_ratio=args.max_distance_ratio,
            max_error_rate=args.error_budget,
            max_hit_error_rate=args.max_hit_error_rate,
            seed=args.seed,
        )
        cache = SemanticCache(embedder, config)
        cutoff = cache.policy.min_similarity
        if args.sweep and args.error_budget is None:
            # Record every guarded candidate, then apply each cut-off afterwards.
            cache.policy = type(cache.policy)(-1.0, cache.policy.max_distance_ratio, cutoff)
        started = time.perf_counter()
        passes = await evaluate(pairs, cache, num_passes=args.passes, seed=args.seed)
        elapsed_s = time.perf_counter() - started
        stats = cache.stats()
        await cache.close()
    first, last = passes[0], passes[-1]
    report: dict[str, Any] = {
        "pairs": str(args.pairs),
        "num_pairs": len(pairs),
        "num_positive": sum(pair.label for pair in pairs),
        "embedder": stats["embedder"],
        "min_similarity": cutoff,
        "max_distance_ratio": args.max_distance_ratio,
        "error_budget": args.error_budget,
        "summary": metrics(last, min_similarity=cutoff if args.error_budget is None else -1.0),
        "lookup_ms": _percentiles(first.lookup_ms),
        "embed_ms": _percentiles(first.embed_ms),
        "search_ms": _percentiles(first.search_ms),
        "elapsed_s": round(elapsed_s, 1),
        "cache_stats": stats,
        "protocol_ceiling": verbatim_repeats(pairs),
    }
    if args.passes > 1:
        report["passes"] = [metrics(item, min_similarity=-1.0) for item in passes]
    if args.sweep and args.error_budget is None:
        report["sweep"] = sweep(last, start=max(0.0, cutoff - 0.1))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hasten eval-cache", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "Outcomes",
    "Pair",
    "Vectors",
    "add_arguments",
    "evaluate",
    "load_pairs",
    "run",
    "verbatim_repeats",
]

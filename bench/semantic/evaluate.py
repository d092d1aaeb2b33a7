"""Precision, recall, false-hit rate and latency of the semantic cache on labelled pairs.

    python bench/semantic/evaluate.py PAIRS.jsonl [--limit N] [--json] [--sweep] ...

(``hasten eval-cache`` until issue 40 moved it here: only benchmarks evaluate.)

Protocol v2 (../shared/data/semcache/README.md, shared with the benchmarks): every distinct
``a`` text (whitespace trimmed) goes into an empty cache once, with a unique answer, then every
``b`` is looked up. A hit is correct when it served the row's own ``a`` and the label is 1, or
when the stored question it served is the asked ``b`` itself (trimmed), whatever the label: a
repeated question is rightly answered from its entry. Any other hit is wrong (label 1) or
false (label 0). precision = correct / hits, recall = correct / answerable rows (label 1, or
``b`` verbatim a stored ``a``), false-hit rate = (wrong + false) / lookups.

v1, reported beside it (``"v1"``) for one release: a hit counts as correct only when the label
is 1 and the row's own ``a`` answered, recall is over label-1 rows. ``--protocol v1`` also
stores the ``a`` of every row separately, as v1 did. ``--limit N`` evaluates a seeded sample.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repo root makes ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from bench.semantic.models import EMBEDDERS, build_embedder, min_similarity_of
from hasten.semantic.embedder import AsyncEmbedder, Embedder
from hasten.semantic.store import SemanticCache
from hasten.semantic.store_config import SemanticStoreConfig

_MODEL = "eval-model"
_TENANT = "eval"
_INSERT_CONCURRENCY = 32
_SWEEP_STEP = 0.0025
_RISK_SWEEP = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3)


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    label: int


@dataclass(slots=True)
class Outcomes:
    """Per lookup (in lookup order): the row, what was served and how close it was.

    ``served`` indexes ``stored``, the texts put in the cache (-1: nothing served); ``risks``
    holds the calibrated chance the hit is wrong (None without a calibration).
    """

    stored: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    served: list[int] = field(default_factory=list)
    similarities: list[float | None] = field(default_factory=list)
    risks: list[float | None] = field(default_factory=list)
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


def stored_questions(pairs: Sequence[Pair], *, protocol: str = "v2") -> list[str]:
    """What goes into the cache: each distinct trimmed ``a`` once (v2), or every row's (v1)."""
    if protocol == "v1":
        return [pair.a for pair in pairs]
    return list(dict.fromkeys(pair.a.strip() for pair in pairs))


def verbatim_repeats(pairs: Sequence[Pair]) -> dict[str, float]:
    """How far protocol v1 capped precision on ``pairs`` (v2 scores these rows correct).

    A row whose ``b`` is, word for word, the ``a`` of exactly one other row meets that row's
    entry at similarity 1; v1 scored answering it from that entry wrong or false. With ``n``
    such rows and ``p`` positives, v1 precision at recall ``r`` is at most ``r*p / (r*p + n)``.
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
        "v1_max_precision_at_recall_0.25": ceiling(0.25),
        "v1_max_precision_at_recall_0.5": ceiling(0.5),
        "v1_max_precision_at_recall_1": ceiling(1.0),
    }


def is_answerable(pair: Pair, stored: set[str]) -> bool:
    """Protocol v2: a row a perfect cache answers (same meaning, or asked verbatim before)."""
    return pair.label == 1 or pair.b.strip() in stored


def verdict(pair: Pair, served_text: str) -> str:
    """Protocol v2's verdict on a hit: ``correct``, ``wrong`` (label 1) or ``false``."""
    served = served_text.strip()
    if served == pair.b.strip() or (pair.label == 1 and served == pair.a.strip()):
        return "correct"
    return "wrong" if pair.label == 1 else "false"


def _verdict_v1(pair: Pair, served_text: str) -> str:
    if pair.label == 1 and served_text.strip() == pair.a.strip():
        return "correct"
    return "wrong" if pair.label == 1 else "false"


def _is_served(outcomes: Outcomes, position: int, min_similarity: float, max_risk: float) -> bool:
    similarity, risk = outcomes.similarities[position], outcomes.risks[position]
    if similarity is None or outcomes.served[position] < 0 or similarity < min_similarity:
        return False
    return risk is None or risk < max_risk


def metrics(
    outcomes: Outcomes,
    pairs: Sequence[Pair],
    *,
    min_similarity: float = -math.inf,
    max_risk: float = math.inf,
) -> dict[str, Any]:
    """Protocol-v2 figures (v1's under ``"v1"``), counting hits at or above
    ``min_similarity`` and below ``max_risk`` (both already applied by the cache itself)."""
    stored = {text.strip() for text in outcomes.stored}
    counts = {"correct": 0, "wrong": 0, "false": 0}
    counts_v1 = dict(counts)
    num_identical = 0
    for position, row in enumerate(outcomes.rows):
        if not _is_served(outcomes, position, min_similarity, max_risk):
            continue
        pair, text = pairs[row], outcomes.stored[outcomes.served[position]]
        counts[verdict(pair, text)] += 1
        counts_v1[_verdict_v1(pair, text)] += 1
        num_identical += text.strip() == pair.b.strip()
    num_lookups = len(outcomes.rows)
    num_answerable = sum(is_answerable(pairs[row], stored) for row in outcomes.rows)
    num_positive = sum(pairs[row].label for row in outcomes.rows)
    report: dict[str, Any] = _figures(counts, num_answerable, num_lookups)
    report["answerable"] = num_answerable
    report["hits_on_identical_text"] = num_identical
    report["v1"] = _figures(counts_v1, num_positive, num_lookups)
    return report


def _figures(counts: dict[str, int], num_answerable: int, num_lookups: int) -> dict[str, Any]:
    num_hits = sum(counts.values())
    return {
        "hits": num_hits,
        **counts,
        "precision": counts["correct"] / num_hits if num_hits else 1.0,
        "recall": counts["correct"] / num_answerable if num_answerable else 0.0,
        "false_hit_rate": (counts["wrong"] + counts["false"]) / max(1, num_lookups),
    }


def sweep(outcomes: Outcomes, pairs: Sequence[Pair], *, start: float) -> list[dict[str, Any]]:
    """Metrics at every cosine cut-off from ``start`` to 1 (guard and ambiguity applied)."""
    rows = []
    for cutoff in np.arange(start, 1.0 + 1e-9, _SWEEP_STEP):
        row: dict[str, Any] = {"min_similarity": round(float(cutoff), 4)}
        row.update(metrics(outcomes, pairs, min_similarity=float(cutoff)))
        rows.append(row)
    return rows


def risk_sweep(outcomes: Outcomes, pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Metrics at several calibrated risk caps (a target precision of 1 - cap)."""
    rows = []
    for cap in _RISK_SWEEP:
        row: dict[str, Any] = {"target_precision": round(1.0 - cap, 4)}
        row.update(metrics(outcomes, pairs, max_risk=cap))
        rows.append(row)
    return rows


def _body(text: str) -> dict[str, Any]:
    return {"model": _MODEL, "messages": [{"role": "user", "content": text}]}


async def evaluate(
    pairs: Sequence[Pair],
    cache: SemanticCache,
    *,
    seed: int = 0,
    protocol: str = "v2",
) -> Outcomes:
    """Runs the protocol: stores every question, then looks every paraphrase up once."""
    stored = stored_questions(pairs, protocol=protocol)
    keys = [f"q-{index}" for index in range(len(stored))]
    for start in range(0, len(stored), _INSERT_CONCURRENCY):
        await asyncio.gather(
            *(
                cache.insert(_body(text), model=_MODEL, tenant=_TENANT, answer_key=key)
                for text, key in zip(
                    stored[start : start + _INSERT_CONCURRENCY],
                    keys[start : start + _INSERT_CONCURRENCY],
                    strict=True,
                )
            )
        )
    outcomes = Outcomes(stored=stored)
    for index in np.random.default_rng(seed).permutation(len(pairs)):
        await _lookup_one(cache, pairs, int(index), outcomes)
    return outcomes


async def _lookup_one(
    cache: SemanticCache, pairs: Sequence[Pair], index: int, outcomes: Outcomes
) -> None:
    pair = pairs[index]
    # The model's own time inside the lookup (none when the text alone decides it).
    embed_s = cache.embedder.embed_s
    started = time.perf_counter()
    match = await cache.lookup(_body(pair.b), model=_MODEL, tenant=_TENANT)
    lookup_ms = (time.perf_counter() - started) * 1000
    embed_ms = min(lookup_ms, (cache.embedder.embed_s - embed_s) * 1000)
    outcomes.embed_ms.append(embed_ms)
    outcomes.search_ms.append(lookup_ms - embed_ms)
    outcomes.lookup_ms.append(lookup_ms)
    outcomes.rows.append(index)
    outcomes.served.append(-1 if match is None else int(match.answer_key.removeprefix("q-")))
    outcomes.similarities.append(None if match is None else match.similarity)
    outcomes.risks.append(None if match is None else match.risk)


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
    parser.add_argument(
        "--json", action="store_true", help="print one JSON report on stdout (summary: stderr)"
    )
    parser.add_argument("--embedder", choices=EMBEDDERS, default="e5")
    parser.add_argument(
        "--target-precision", type=float, default=0.95, help="the calibrated default's target"
    )
    parser.add_argument(
        "--min-similarity", type=float, default=None, help="a raw cosine cut-off instead"
    )
    parser.add_argument("--max-distance-ratio", type=float, default=0.9)
    parser.add_argument("--sweep", action="store_true", help="also report other cut-offs")
    parser.add_argument("--protocol", choices=("v2", "v1"), default="v2", help="cache layout")


def run(args: argparse.Namespace) -> int:
    pairs = load_pairs(args.pairs, limit=args.limit, seed=args.seed)
    report = asyncio.run(_run(args, pairs))
    line = (
        f"evaluate {args.pairs.name}: {len(pairs)} pairs, precision {report['precision']:.3f}"
        f" recall {report['recall']:.3f} false-hit rate {report['false_hit_rate']:.4f}"
        f" (v1: {report['v1']['precision']:.3f} / {report['v1']['recall']:.3f})"
        f" lookup p50 {report['lookup_ms']['p50']:.1f} ms (embed {report['embed_ms']['p50']:.1f}"
        f" ms, search {report['search_ms']['p50']:.2f} ms)"
    )
    if args.json:  # stdout carries one JSON object, for scripts
        print(line, file=sys.stderr)
        print(json.dumps(report, indent=2))
    else:
        print(line)
    return 0


async def _run(
    args: argparse.Namespace,
    pairs: Sequence[Pair],
    model: Embedder | None = None,
) -> dict[str, Any]:
    """One evaluation; ``model`` lets a benchmark share one (memoising) embedder across runs."""
    model = model if model is not None else build_embedder(args.embedder)
    protocol = getattr(args, "protocol", "v2")
    # Remember every text: a benchmark sharing one embedder across runs embeds each once.
    embedder = AsyncEmbedder(model, num_remembered=2 * len(pairs) + 16)
    is_sweep = args.sweep
    with tempfile.TemporaryDirectory(prefix="hasten-eval-") as directory:
        config = SemanticStoreConfig(
            path=Path(directory) / "semantic.sqlite3",
            min_similarity=(
                min_similarity_of(model) if args.min_similarity is None else args.min_similarity
            ),
            target_precision=getattr(args, "target_precision", 0.95),
            max_distance_ratio=args.max_distance_ratio,
        )
        cache = SemanticCache(embedder, config)
        policy = cache.policy
        is_calibrated = policy.calibration is not None
        if is_sweep:
            # Record every guarded candidate (with its risk), then apply each cut-off afterwards.
            cache.policy = replace(
                policy, min_similarity=-1.0, qualifying_similarity=policy.min_similarity
            )
            if is_calibrated:
                cache.policy = replace(policy, max_risk=math.inf)
        started = time.perf_counter()
        outcomes = await evaluate(pairs, cache, seed=args.seed, protocol=protocol)
        elapsed_s = time.perf_counter() - started
        stats = cache.stats()
        await cache.close()
    cutoff = -math.inf if is_calibrated else policy.min_similarity
    summary = metrics(outcomes, pairs, min_similarity=cutoff, max_risk=policy.max_risk)
    report: dict[str, Any] = {
        "protocol": protocol,
        "precision": summary["precision"],
        "recall": summary["recall"],
        "false_hit_rate": summary["false_hit_rate"],
        "v1": summary["v1"],
        "pairs": str(args.pairs),
        "num_pairs": len(pairs),
        "num_positive": sum(pair.label for pair in pairs),
        "num_stored": len(outcomes.stored),
        "embedder": stats["embedder"],
        "decision": "calibrated" if is_calibrated else "min_similarity",
        "target_precision": round(1.0 - policy.max_risk, 6) if is_calibrated else None,
        "min_similarity": None if is_calibrated else policy.min_similarity,
        "max_distance_ratio": args.max_distance_ratio,
        "summary": summary,
        "lookup_ms": _percentiles(outcomes.lookup_ms),
        "embed_ms": _percentiles(outcomes.embed_ms),
        "search_ms": _percentiles(outcomes.search_ms),
        "elapsed_s": round(elapsed_s, 1),
        "cache_stats": stats,
        "protocol_ceiling": verbatim_repeats(pairs),
    }
    if is_sweep and is_calibrated:
        report["sweep"] = risk_sweep(outcomes, pairs)
    elif is_sweep:
        report["sweep"] = sweep(outcomes, pairs, start=max(0.0, policy.min_similarity - 0.1))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/semantic/evaluate.py", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

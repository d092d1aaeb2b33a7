"""The asynchronous judge on the dev files: each file replayed twice, protocol v2 figures of
the second pass, against the default (no judge).

    python bench/semantic_judge.py [--limit 2000] [--band 0.45]

Protocol v2 store (every distinct ``a`` once), then every ``b`` looked up, twice, in one
seeded order (``hasten.semantic.evaluate``'s). A lookup that serves nothing but whose near
entry's calibrated risk is within ``--band`` of the serving bound is judged at once (the
gateway judges in the background; here the next lookup comes later than any judgement
would). A yes whose answers agree becomes a verified alias (``SemanticCache.add_alias``, the
store's own code); pass 2 shows what the aliases serve. The misses' own questions are not
inserted (unlike the gateway), so pass 2 isolates what the aliases add.

Judges: ``oracle`` (the dev labels: yes exactly when serving the near entry is right under
protocol v2), an upper bound; ``verifier`` (the ``--verifier`` model's cosine, USE by
default or nomic, >= its yes-similarity, from bench/semantic_vectors.py's cached vectors).
The dev files carry no answers, so the answer agreement is simulated two ways:
``agree=oracle`` (an ideal deterministic upstream: two answers agree exactly when one
question's answer serves the other) and ``agree=always``
(answers always agree: the judge alone decides, a worst case). A real upstream lies between.
Prints one summary line, then JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import semantic as bench
import semantic_vectors as vectors_mod

from hasten.semantic import evaluate
from hasten.semantic.embedder import AsyncEmbedder, Embedder
from hasten.semantic.judge import yes_similarity_of
from hasten.semantic.judge_rules import JudgeCase, is_judgeable
from hasten.semantic.partition import split_chat
from hasten.semantic.store import NewEntry, SemanticCache
from hasten.semantic.store_config import SemanticStoreConfig

_MODEL, _TENANT = "eval-model", "eval"
# (asked, stored, whether serving stored is right by the labels) -> yes?
Judge = Callable[[str, str, bool], bool]
YES_SIMILARITIES = {"use": (0.8, 0.9), "nomic": (0.85, 0.9, 0.93, 0.95)}


def _body(text: str) -> dict[str, Any]:
    return {"model": _MODEL, "messages": [{"role": "user", "content": text}]}


async def _replay(
    pairs: Sequence[evaluate.Pair],
    model: Embedder,
    judge: Judge | None,
    *,
    is_agreement_oracle: bool,
    band: float,
) -> dict[str, Any]:
    stored = evaluate.stored_questions(pairs)
    counts = {"judged": 0, "yes": 0, "yes_right": 0, "no_right": 0, "aliases": 0}
    passes = []
    judged: set[tuple[str, str]] = set()  # the judge remembers its verdicts (``judge``)
    with tempfile.TemporaryDirectory(prefix="hasten-judge-") as directory:
        embedder = AsyncEmbedder(model, num_remembered=2 * len(pairs) + 16)
        config = SemanticStoreConfig(path=Path(directory) / "semantic.sqlite3")
        cache = SemanticCache(embedder, config)
        entries = [NewEntry(_body(t), _MODEL, _TENANT, f"q-{i}") for i, t in enumerate(stored)]
        await cache.insert_many(entries)
        max_risk = cache.policy.max_risk
        order = np.random.default_rng(0).permutation(len(pairs))
        started = time.perf_counter()
        for _ in range(2):
            outcomes = evaluate.Outcomes(stored=stored)
            for index in order:
                pair = pairs[int(index)]
                result = await cache.lookup_near(_body(pair.b), model=_MODEL, tenant=_TENANT)
                match, near = result.match, result.near
                outcomes.rows.append(int(index))
                outcomes.served.append(-1 if match is None else int(match.answer_key[2:]))
                outcomes.similarities.append(None if match is None else match.similarity)
                outcomes.risks.append(None if match is None else match.risk)
                if judge is None or match is not None or near is None:
                    continue
                if (
                    not is_judgeable(near.risk, max_risk, band)
                    or (pair.b, near.answer_key) in judged
                ):
                    continue
                judged.add((pair.b, near.answer_key))
                is_right = evaluate.verdict(pair, stored[int(near.answer_key[2:])]) == "correct"
                counts["judged"] += 1
                is_yes = judge(pair.b, near.text, is_right)
                counts["yes"] += is_yes
                counts["yes_right"] += is_yes and is_right
                counts["no_right"] += not is_yes and is_right
                if not is_yes or (is_agreement_oracle and not is_right):
                    continue
                query = split_chat(_body(pair.b), model=_MODEL, tenant=_TENANT)
                assert query is not None and near.risk is not None
                case = JudgeCase(
                    _TENANT, query.partition_key, _MODEL, query.text, near.text,
                    near.entry_id, near.answer_key, near.risk, near.script,
                )  # fmt: skip
                counts["aliases"] += await cache.add_alias(case, ttl_s=3600) is not None
            passes.append(outcomes)
        stats = cache.script_stats()
        await cache.close()
    second = evaluate.metrics(passes[-1], pairs)
    keep = ("precision", "recall", "false_hit_rate", "hits", "correct", "wrong", "false")
    return {
        **{key: second[key] for key in keep},
        "first_pass": {key: evaluate.metrics(passes[0], pairs)[key] for key in keep[:4]},
        **counts,
        "yes_precision": round(counts["yes_right"] / counts["yes"], 4) if counts["yes"] else None,
        "alias_hits": sum(s.get("alias_hits", 0) for s in stats.values()),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def _verifier_judge(use: vectors_mod.CachedEmbedder, yes_similarity: float) -> Judge:
    def judge(asked: str, stored: str, is_right: bool) -> bool:
        rows = use.embed([asked, stored])
        return float(np.dot(rows[0], rows[1])) >= yes_similarity

    return judge


def _oracle(asked: str, stored: str, is_right: bool) -> bool:
    return is_right


def _dataset(
    dataset: str,
    limit: int | None,
    band: float,
    memo: vectors_mod.CachedEmbedder,
    use: vectors_mod.CachedEmbedder,
    yes_similarity: float,
    sweep: Sequence[float],
) -> dict[str, Any]:
    pairs = evaluate.load_pairs(bench.DATA_DIR / f"{dataset}.jsonl", limit=limit, seed=0)

    def run(judge: Judge | None, *, oracle_agreement: bool = True) -> dict[str, Any]:
        result = asyncio.run(
            _replay(pairs, memo, judge, is_agreement_oracle=oracle_agreement, band=band)
        )
        print(f"{dataset}: {result}", file=sys.stderr, flush=True)  # progress (bounded run)
        return result

    verifier = _verifier_judge(use, yes_similarity)
    return {
        "num_pairs": len(pairs),
        "default": run(None),
        "oracle_judge": run(_oracle),
        "verifier_judge_agree_oracle": run(verifier),
        "verifier_judge_agree_always": run(verifier, oracle_agreement=False),
        "verifier_yes_similarity_sweep_agree_always": {
            str(s): {
                k: v
                for k, v in run(_verifier_judge(use, s), oracle_agreement=False).items()
                if k in ("precision", "recall", "judged", "yes", "yes_precision", "aliases")
            }
            for s in sweep
        },
    }


def _band_sweep(
    datasets: Sequence[str],
    limits: dict[str, int],
    bands: Sequence[float],
    memo: vectors_mod.CachedEmbedder,
    use: vectors_mod.CachedEmbedder,
) -> None:
    keep = ("precision", "recall", "judged", "yes", "yes_precision", "aliases")
    verifier = _verifier_judge(use, yes_similarity_of(use.name))
    rows: dict[str, Any] = {}
    for dataset in datasets:
        path = bench.DATA_DIR / f"{dataset}.jsonl"
        pairs = evaluate.load_pairs(path, limit=limits.get(dataset), seed=0)
        for band in bands:
            for name, judge, is_oracle in (("oracle", _oracle, True), ("use", verifier, False)):
                result = asyncio.run(
                    _replay(pairs, memo, judge, is_agreement_oracle=is_oracle, band=band)
                )
                rows[f"{dataset} band {band:g} {name}"] = {k: result[k] for k in keep}
                print(rows[f"{dataset} band {band:g} {name}"], file=sys.stderr, flush=True)
    bench._emit(f"semantic judge band sweep: {len(rows)} runs", {"rows": rows})


def _summary(report: dict[str, Any]) -> str:
    parts = []
    for dataset, row in report["datasets"].items():
        d, o = row["default"], row["oracle_judge"]
        v, w = row["verifier_judge_agree_oracle"], row["verifier_judge_agree_always"]
        parts.append(
            f"{dataset}: default P {d['precision']:.3f} R {d['recall']:.3f}"
            f" | oracle judge P {o['precision']:.3f} R {o['recall']:.3f}"
            f" | {report['verifier']} judge P {v['precision']:.3f}-{w['precision']:.3f}"
            f" R {w['recall']:.3f}-{v['recall']:.3f}"
        )
    return "semantic judge (pass 2): " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=2000, help="qqp_dev sample size")
    parser.add_argument("--band", type=float, default=0.45, help="risk band above the bound")
    parser.add_argument("--datasets", nargs="*", default=list(bench.DATASETS))
    parser.add_argument(
        "--band-sweep", type=float, nargs="*", default=None,
        help="only the oracle and the USE judge (answers always agreeing) at these bands",
    )  # fmt: skip
    parser.add_argument("--verifier", default="use", help="the local judge: use or nomic")
    args = parser.parse_args()
    limits = {"qqp_dev": args.limit}
    memo = vectors_mod.CachedEmbedder("e5", limits=limits)
    use = vectors_mod.CachedEmbedder(args.verifier, limits=limits)
    yes_similarity = yes_similarity_of(use.name)
    sweep = YES_SIMILARITIES[args.verifier]
    if args.band_sweep:
        _band_sweep(args.datasets, limits, args.band_sweep, memo, use)
        return
    started = time.perf_counter()
    datasets = {
        name: _dataset(name, limits.get(name), args.band, memo, use, yes_similarity, sweep)
        for name in args.datasets
    }
    report = {
        "band": args.band,
        "verifier": args.verifier,
        "verifier_yes_similarity": yes_similarity,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "datasets": datasets,
    }
    bench._emit(_summary(report), report)


if __name__ == "__main__":
    main()

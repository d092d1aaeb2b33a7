"""Live recall of the semantic cache: paraphrases arriving one by one.

    python bench/semantic/live.py [--limit N] [--seed S] [--embedder e5|minilm]

``bench/semantic/evaluate.py`` stores every ``a`` question, then looks up every ``b``: nothing is
ever stored after a miss, so it cannot show what live traffic does (a paraphrase just below
the cut-off is stored under its own answer, and later paraphrases near both are ambiguous).
Here each text of gptcache_mock_pairs arrives once, in a seeded shuffled order, at a
``SemanticTier`` in front of an in-memory exact cache, exactly as the gateway drives it: a
hit is correct if the served answer was stored for a question of the same cluster; a miss is
answered "upstream" with the cluster's canonical answer (its first ``a`` text) and
remembered. Clusters: each row's ``a`` and ``b``, merged across rows that share a text.

live recall = correct hits / texts whose cluster already had an earlier member;
precision = correct hits / hits. ``--limit N`` keeps a seeded sample of N clusters.
Prints one summary line, then JSON. Data: ../shared/data/semcache (read at run time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

import orjson

from bench.semantic.models import build_embedder
from hasten.cache import CachedAnswer, MemoryLRU, TieredCache, cache_key
from hasten.semantic.store import SemanticCache, SemanticStoreConfig
from hasten.semantic.tier import SemanticTier

DATA = Path(os.environ.get("HASTEN_SEMCACHE_DATA", "/work/shared/data/semcache"))
PAIRS = DATA / "gptcache_mock_pairs.jsonl"
_MODEL, _TENANT = "bench-model", "bench"
_TTL_S = 86_400.0
_COUNTERS = ("lookup_hit", "lookup_below_threshold", "lookup_ambiguous", "lookup_guard")


@dataclass(frozen=True, slots=True)
class Cluster:
    texts: tuple[str, ...]
    answer: str


def load_clusters(path: Path) -> list[Cluster]:
    """Paraphrase clusters in file order (union-find over rows sharing a text)."""
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        parent.setdefault(text, text)
        while parent[text] != text:
            parent[text] = parent[parent[text]]
            text = parent[text]
        return text

    for row in rows:
        parent[root(row["b"])] = root(row["a"])
    members: dict[str, list[str]] = {}
    answers: dict[str, str] = {}
    for row in rows:
        for text in (row["a"], row["b"]):
            group = members.setdefault(root(text), [])
            if text not in group:
                group.append(text)
        answers.setdefault(root(row["a"]), row["a"])  # the first ``a`` of its cluster
    return [Cluster(tuple(texts), answers[key]) for key, texts in members.items()]


def _body(text: str) -> dict[str, Any]:
    return {"model": _MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0}


def _completion(answer: str) -> bytes:
    message = {"role": "assistant", "content": answer}
    return orjson.dumps(
        {"object": "chat.completion", "model": _MODEL,
         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    )  # fmt: skip


class _Stream:
    """Feeds texts through the tier as the gateway would, tallying against the clusters."""

    def __init__(self, tier: SemanticTier, exact: TieredCache, clusters: list[Cluster]) -> None:
        self.tier, self.exact, self.clusters = tier, exact, clusters
        self.cluster_of_key: dict[str, int] = {}
        self.arrivals: Counter[int] = Counter()
        self.tally: Counter[str] = Counter()

    async def ask(self, text: str, cluster: int) -> None:
        # Recall by arrival: the collapse shows at the third paraphrase of a question on.
        earlier = self.arrivals[cluster]
        self.arrivals[cluster] += 1
        position = "_second" if earlier == 1 else "_third_on"
        if earlier > 0:
            self.tally["eligible"] += 1
            self.tally["eligible" + position] += 1
        body = _body(text)
        hit = await self.tier.find(body, model=_MODEL, tenant=_TENANT, max_age_s=None)
        if hit is not None:
            is_correct = self.cluster_of_key[hit.match.answer_key] == cluster
            self.tally["hits"] += 1
            self.tally["correct" if is_correct else "wrong"] += 1
            if is_correct:  # only ever after an earlier member: its answer was served
                self.tally["correct" + position] += 1
            elif earlier == 0:  # nothing of its own stored yet: another question's answer
                self.tally["wrong_first_of_cluster"] += 1
            return
        key = cache_key(body, endpoint="chat", model=_MODEL, tenant=_TENANT)
        answer = _completion(self.clusters[cluster].answer)
        self.exact.put(key, CachedAnswer.from_body(answer, endpoint="chat", ttl_s=_TTL_S))
        self.cluster_of_key[key] = cluster
        self.tier.remember(body, model=_MODEL, tenant=_TENANT, key=key, ttl_s=_TTL_S)
        await self.tier.drain()  # in order: the next text sees this one indexed


async def run_stream(
    stream: list[tuple[str, int]],
    clusters: list[Cluster],
    *,
    embedder: str,
) -> dict[str, Any]:
    """One pass of the stream through a fresh cache."""
    exact = TieredCache(MemoryLRU(1 << 30))
    with tempfile.TemporaryDirectory(prefix="hasten-live-") as directory:
        # The cosine cut-off and its ambiguity test (0.96): at the default target only
        # repeats are served, and this stream has none.
        config = SemanticStoreConfig(path=Path(directory) / "semantic.sqlite3", min_similarity=0.96)
        semantic = SemanticCache(build_embedder(embedder), config)
        tier = SemanticTier(semantic, exact)
        run = _Stream(tier, exact, clusters)
        started = time.perf_counter()
        for text, cluster in stream:
            await run.ask(text, cluster)
        elapsed_s = time.perf_counter() - started
        stats = tier.cache.stats()
        await tier.aclose()
    return _summary(run.tally, stats, elapsed_s)


def _summary(tally: Counter[str], stats: dict[str, Any], elapsed_s: float) -> dict[str, Any]:
    hits, correct = tally["hits"], tally["correct"]
    return {
        "hits": hits,
        "correct": correct,
        "wrong": tally["wrong"],
        "wrong_first_of_cluster": tally["wrong_first_of_cluster"],
        "eligible": tally["eligible"],
        "live_recall": round(correct / max(1, tally["eligible"]), 4),
        "live_recall_second": round(tally["correct_second"] / max(1, tally["eligible_second"]), 4),
        "live_recall_third_on": round(
            tally["correct_third_on"] / max(1, tally["eligible_third_on"]), 4
        ),
        "eligible_third_on": tally["eligible_third_on"],
        "precision": round(correct / hits, 4) if hits else 1.0,
        "entries": stats["entries"],
        "counters": {name: stats.get(name, 0) for name in _COUNTERS},
        "min_similarity": stats["min_similarity"],
        "elapsed_s": round(elapsed_s, 1),
    }


def build_stream(
    clusters: list[Cluster], *, limit: int | None, seed: int
) -> tuple[list[Cluster], list[tuple[str, int]]]:
    rng = random.Random(seed)
    if limit is not None and limit < len(clusters):
        clusters = rng.sample(clusters, limit)
    stream = [(text, index) for index, cluster in enumerate(clusters) for text in cluster.texts]
    rng.shuffle(stream)
    return clusters, stream


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    clusters, stream = build_stream(load_clusters(args.pairs), limit=args.limit, seed=args.seed)
    report: dict[str, Any] = {
        "pairs": str(args.pairs),
        "embedder": args.embedder,
        "seed": args.seed,
        "clusters": len(clusters),
        "texts": len(stream),
        "cluster_sizes": dict(sorted(Counter(len(c.texts) for c in clusters).items())),
    }
    report["live"] = await run_stream(stream, clusters, embedder=args.embedder)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--limit", type=int, default=None, help="seeded sample of N clusters")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedder", default="e5", choices=("e5", "minilm"))
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    live = report["live"]
    print(
        f"semantic live ({args.embedder}, {report['texts']} texts in {report['clusters']}"
        f" clusters, seed {args.seed}): recall {live['live_recall']:.3f} precision"
        f" {live['precision']:.3f} ({live['hits']} hits, {live['wrong']} wrong); ambiguous"
        f" {live['counters']['lookup_ambiguous']}; recall from the third paraphrase on"
        f" {live['live_recall_third_on']:.3f}"
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

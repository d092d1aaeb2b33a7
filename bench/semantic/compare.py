"""Semantic-cache benchmarks: embedders, ANN libraries, scale, the guard.

    python bench/semantic/compare.py embedders [--limit 2000]  # quality + latency per embedder
    python bench/semantic/compare.py ann [--entries 100000]    # usearch, hnswlib, faiss, exact
    python bench/semantic/compare.py scale [--entries 1000000] # search at 1M, embed+search 100k
    python bench/semantic/compare.py guard                     # near-miss guard speed, vetoes

Each prints one summary line, then JSON. Data: ../shared/data/semcache (evaluation only).
GPTCache with the same embedder: bench/semantic/quality.py (gptcache_env.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

import numpy as np

DATA_DIR = Path(os.environ.get("HASTEN_SEMCACHE_DATA", "/work/shared/data/semcache"))
DATASETS = ("qqp_dev", "gptcache_mock_pairs", "zh_sts_dev")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _percentiles(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(float(np.percentile(values, 50)), 4),
        "p99": round(float(np.percentile(values, 99)), 4),
    }


def _emit(summary: str, report: dict[str, Any]) -> None:
    print(summary)
    print(json.dumps(report, indent=2, default=float))


# The embedders are compared by cosine sweeps at their measured cut-offs (not calibrated).
_COSINE = {"e5": 0.96, "minilm": 0.84}


def _eval(dataset: str, embedder: str, limit: int | None) -> dict[str, Any]:
    from bench.semantic import evaluate

    args = argparse.Namespace(
        pairs=DATA_DIR / f"{dataset}.jsonl", limit=limit, seed=0, embedder=embedder,
        min_similarity=_COSINE[embedder], max_distance_ratio=0.9, sweep=True,
    )  # fmt: skip
    pairs = evaluate.load_pairs(args.pairs, limit=limit, seed=0)
    return asyncio.run(evaluate._run(args, pairs))


def _operating_points(sweep: list[dict[str, float]]) -> dict[str, Any]:
    def recall_at(precision: float) -> float:
        return max((row["recall"] for row in sweep if row["precision"] >= precision), default=0)

    best = max(sweep, key=lambda row: (row["precision"], row["recall"]))
    return {
        "max_precision": {k: best[k] for k in ("min_similarity", "precision", "recall")},
        "recall_at_precision": {str(p): recall_at(p) for p in (0.7, 0.8, 0.85, 0.9, 0.97)},
    }


def bench_embedders(args: argparse.Namespace) -> None:
    from bench.semantic.models import build_embedder

    texts = [json.loads(line)["a"] for line in (DATA_DIR / "qqp_dev.jsonl").open()][:200]
    report: dict[str, Any] = {}
    for kind, threads in (("e5", 1), ("e5", 2), ("minilm", 1), ("minilm", 2)):
        model = build_embedder(kind, num_threads=threads)
        model.embed(texts[:4])
        single = []
        for text in texts[:100]:
            started = time.perf_counter()
            model.embed([text])
            single.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        for start in range(0, 96, 8):
            model.embed(texts[start : start + 8])
        batch_ms = (time.perf_counter() - started) * 1000 / 96
        report[f"{kind}/{threads}t"] = {"single_ms": _percentiles(single), "batch8_ms": batch_ms}
    for kind in ("e5", "minilm"):
        for dataset in DATASETS:
            limit = args.limit if dataset == "qqp_dev" else None
            result = _eval(dataset, kind, limit)
            report[f"{kind}/{dataset}"] = {
                "num_pairs": result["num_pairs"],
                "default": result["summary"] | {"min_similarity": result["min_similarity"]},
                **_operating_points(result["sweep"]),
                "embed_ms": result["embed_ms"],
            }
    e5, mini = report["e5/1t"]["single_ms"]["p50"], report["minilm/1t"]["single_ms"]["p50"]
    _emit(f"embedders: e5 {e5:.1f} ms/query, minilm {mini:.1f} ms/query (1 thread)", report)


def _synthetic(num_entries: int, dim: int, seed: int = 0) -> np.ndarray:
    """Clustered unit vectors, a stand-in for question embeddings (topics + paraphrases)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(16, num_entries // 50), dim)).astype(np.float32)
    vectors = np.empty((num_entries, dim), dtype=np.float32)
    for start in range(0, num_entries, 100_000):
        stop = min(num_entries, start + 100_000)
        picks = rng.integers(0, len(centers), stop - start)
        noise = rng.standard_normal((stop - start, dim)).astype(np.float32)
        vectors[start:stop] = centers[picks] + 0.8 * noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _queries(vectors: np.ndarray, num_queries: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Near-duplicates of stored vectors (cosine about 0.95), and which entry each targets."""
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, len(vectors), num_queries)
    noise = rng.standard_normal((num_queries, vectors.shape[1])).astype(np.float32)
    queries = vectors[targets] + 0.016 * noise
    return queries / np.linalg.norm(queries, axis=1, keepdims=True), targets


def _time_search(search: Any, queries: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    latencies, num_found = [], 0
    for query, target in zip(queries, targets, strict=True):
        started = time.perf_counter()
        found = search(query)
        latencies.append((time.perf_counter() - started) * 1000)
        num_found += int(found == target)
    return {"search_ms": _percentiles(latencies), "recall_at_1": num_found / len(queries)}


def _ann_builders(dim: int) -> dict[str, Any]:
    def build_usearch(vectors: np.ndarray) -> Any:
        from usearch.index import Index

        index = Index(ndim=dim, metric="ip", dtype="f16", connectivity=16, expansion_add=128,
                      expansion_search=64)  # fmt: skip
        index.add(np.arange(len(vectors), dtype=np.uint64), vectors, threads=2)
        return lambda q: int(index.search(q, 1, threads=1).keys[0])

    def build_hnswlib(vectors: np.ndarray) -> Any:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.init_index(max_elements=len(vectors), ef_construction=128, M=16)
        index.set_num_threads(2)
        index.add_items(vectors, np.arange(len(vectors)))
        index.set_ef(64)
        index.set_num_threads(1)
        return lambda q: int(index.knn_query(q, k=1)[0][0, 0])

    def build_faiss(vectors: np.ndarray) -> Any:
        import faiss

        faiss.omp_set_num_threads(2)
        index = faiss.IndexHNSWFlat(dim, 16, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 128
        index.add(vectors)
        index.hnsw.efSearch = 64
        faiss.omp_set_num_threads(1)
        return lambda q: int(index.search(q[None], 1)[1][0, 0])

    def build_exact(vectors: np.ndarray) -> Any:
        return lambda q: int(np.argmax(vectors @ q))

    return {"usearch-f16": build_usearch, "hnswlib": build_hnswlib, "faiss-hnsw": build_faiss,
            "exact-numpy": build_exact}  # fmt: skip


def bench_ann(args: argparse.Namespace) -> None:
    dim = 384
    vectors = _synthetic(args.entries, dim)
    queries, targets = _queries(vectors, 1000)
    report: dict[str, Any] = {"entries": args.entries, "dim": dim}
    for name, build in _ann_builders(dim).items():
        before = _rss_bytes()
        started = time.perf_counter()
        search = build(vectors)
        build_s = time.perf_counter() - started
        added = max(0, _rss_bytes() - before)
        report[name] = {"build_s": round(build_s, 1), "bytes_per_entry": added // args.entries}
        report[name].update(_time_search(search, queries, targets))
        del search
    line = ", ".join(
        f"{name} p50 {entry['search_ms']['p50']:.3f} ms r@1 {entry['recall_at_1']:.3f}"
        for name, entry in report.items()
        if isinstance(entry, dict)
    )
    _emit(f"ann at {args.entries} entries: {line}", report)


def bench_scale(args: argparse.Namespace) -> None:
    from hasten.semantic.index import VectorIndex

    dim = 384
    vectors = _synthetic(args.entries, dim)
    before = _rss_bytes()
    index = VectorIndex(dim)
    started = time.perf_counter()
    index.load_partition("p", np.arange(args.entries), vectors)
    build_s = time.perf_counter() - started
    index_bytes = _rss_bytes() - before
    queries, targets = _queries(vectors, 2000)
    timing = _time_search(lambda q: index.search("p", q, 8)[0][0], queries, targets)
    report = {
        "entries": args.entries, "build_s": round(build_s, 1),
        "index_bytes_per_entry": index_bytes // args.entries,
        **timing,
    }  # fmt: skip
    report["embed_plus_search_100k"] = asyncio.run(_embed_plus_search(100_000, dim))
    end_to_end = report["embed_plus_search_100k"]["lookup_ms"]["p50"]
    _emit(
        f"scale: search p50 {timing['search_ms']['p50']:.3f} ms at {args.entries} entries,"
        f" embed+search p50 {end_to_end:.1f} ms at 100k entries",
        report,
    )


async def _embed_plus_search(num_entries: int, dim: int) -> dict[str, Any]:
    """Full lookups (split, embed, search, guard) against 100k stored synthetic entries."""
    from hasten.semantic.e5 import E5Embedder
    from hasten.semantic.partition import split_chat
    from hasten.semantic.records import Row
    from hasten.semantic.store import SemanticCache, SemanticStoreConfig

    texts = [json.loads(line)["b"] for line in (DATA_DIR / "qqp_dev.jsonl").open()][:300]
    with tempfile.TemporaryDirectory() as directory:
        cache = SemanticCache(E5Embedder(), SemanticStoreConfig(path=Path(directory) / "s.sqlite3"))
        probe = {"model": "m", "messages": [{"role": "user", "content": "probe"}]}
        query = split_chat(probe, model="m", tenant="t")
        assert query is not None
        vectors = _synthetic(num_entries, dim, seed=3)
        records = await cache._run(cache._open)

        def bulk_load() -> None:  # bench-only shortcut past the embedder
            for start in range(0, num_entries, 10_000):
                for offset, vector in enumerate(vectors[start : start + 10_000]):
                    number = start + offset
                    now = time.time()
                    row = Row(query.partition_key, "t", "m", f"stored question {number}",
                              f"k{number}", now, now + 1e9)  # fmt: skip
                    records.insert(row, vector)

        await cache._run(bulk_load)
        latencies = []
        for text in texts:
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            started = time.perf_counter()
            await cache.lookup(body, model="m", tenant="t")
            latencies.append((time.perf_counter() - started) * 1000)
        await cache.close()
        files = Path(directory).glob("s.sqlite3*")
        sqlite_bytes = sum(path.stat().st_size for path in files if path.is_file())
    # The first lookup loads the partition from SQLite (a one-off per process).
    return {"entries": num_entries, "lookup_ms": _percentiles(latencies[1:]),
            "first_lookup_ms": round(latencies[0], 1),
            "sqlite_bytes_per_entry": sqlite_bytes // num_entries}  # fmt: skip


def bench_guard(args: argparse.Namespace) -> None:
    """Near-miss guard on the labelled pairs themselves: speed, and how often it vetoes
    pairs of each label (a veto of a label-1 pair costs recall, of a label-0 pair saves a
    false hit if the embedder would have matched it)."""
    from collections import Counter

    from hasten.semantic import guard

    report: dict[str, Any] = {}
    for dataset in DATASETS:
        rows = [json.loads(line) for line in (DATA_DIR / f"{dataset}.jsonl").open()]
        latencies: list[float] = []
        vetoes: dict[int, Counter[str]] = {0: Counter(), 1: Counter()}
        for row in rows:
            started = time.perf_counter()
            reason = guard.compare(guard.signature(row["a"]), guard.signature(row["b"]))
            latencies.append((time.perf_counter() - started) * 1e6)
            vetoes[int(row["label"])][reason or "pass"] += 1
        report[dataset] = {
            "pair_us": _percentiles(latencies),
            **{
                f"label_{label}": {
                    "veto_rate": (1 - counts["pass"] / counts.total()) if counts else None,
                    "by_reason": dict(counts),
                }
                for label, counts in vetoes.items()
            },
        }
    qqp = report["qqp_dev"]
    _emit(
        f"guard: {qqp['pair_us']['p50']:.0f} us per pair (p50, both texts),"
        f" qqp vetoes {qqp['label_0']['veto_rate']:.2f} of label-0 and"
        f" {qqp['label_1']['veto_rate']:.2f} of label-1 pairs",
        report,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("which", choices=("embedders", "ann", "scale", "guard"))
    parser.add_argument("--limit", type=int, default=2000, help="qqp_dev sample size")
    parser.add_argument("--entries", type=int, default=None)
    args = parser.parse_args()
    if args.entries is None:
        args.entries = 1_000_000 if args.which == "scale" else 100_000
    benches = {
        "embedders": bench_embedders,
        "ann": bench_ann,
        "scale": bench_scale,
        "guard": bench_guard,
    }
    benches[args.which](args)


if __name__ == "__main__":
    main()

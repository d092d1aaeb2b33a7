"""Runs inside GPTCache's venv (bench/.venvs/gptcache; no hasten there), driven by
bench/semantic/gptcache_env.py:

    python gptcache_worker.py INPUTS.npz REQUEST.json WORK_DIR

GPTCache as its users set it up: ``Cache.init`` with a ``manager_factory("sqlite,faiss")``
data manager, ``SearchDistanceEvaluation`` and ``get_prompt``, through its ``put``/``get``
API; only the embedding function is ours, reading hasten's e5 vectors from INPUTS.npz.
Two caches: one at GPTCache's default ``Config()`` threshold, one at threshold 0 (every
lookup served its nearest entry) whose scores, read through ``get``'s ``hit_callback``, the
other side replays at every threshold. Prints one JSON line: what was served, at what score.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from gptcache import Cache, Config
from gptcache.adapter.api import get, put
from gptcache.manager import manager_factory
from gptcache.processor.pre import get_prompt
from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation


def _cache(
    directory: Path, vectors: dict[str, np.ndarray], num_entries: int, threshold: float
) -> Cache:
    def embed(text: str, **_: Any) -> np.ndarray:
        return vectors[text]

    directory.mkdir(parents=True, exist_ok=True)
    dim = len(next(iter(vectors.values())))
    # The whole set fits: its LRU default, 1000 entries, would evict (not what is measured).
    # manager_factory ignores its own max_size for the memory eviction manager (0.1.44 reads
    # eviction_params["max_size"] instead): both are given.
    manager = manager_factory(
        "sqlite,faiss",
        data_dir=str(directory),
        max_size=num_entries + 1,
        vector_params={"dimension": dim},
        eviction_params={"max_size": num_entries + 1},
    )
    cache = Cache()
    cache.init(pre_embedding_func=get_prompt, embedding_func=embed, data_manager=manager,
               similarity_evaluation=SearchDistanceEvaluation(),
               config=Config(similarity_threshold=threshold))  # fmt: skip
    return cache


def _lookups(cache: Cache, asked: list[str]) -> dict[str, Any]:
    served, scores, latencies_ms = [], [], []
    for text in asked:
        found: list[tuple[str, float]] = []
        started = time.perf_counter()
        answer = get(text, cache_obj=cache, hit_callback=found.extend)
        latencies_ms.append((time.perf_counter() - started) * 1000)
        served.append(-1 if answer is None else int(str(answer).removeprefix("q-")))
        scores.append(None if answer is None else max(score for _, score in found))
    return {"served": served, "scores": scores, "latency_ms": latencies_ms}


def main() -> None:
    inputs, request_path, work_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    os.chdir(work_dir)  # GPTCache's default data manager writes to the working directory
    stored_npz = np.load(inputs, allow_pickle=False)
    vectors = dict(zip((str(t) for t in stored_npz["texts"]), stored_npz["vectors"], strict=True))
    request = json.loads(request_path.read_text())
    stored, asked = request["stored"], request["asked"]
    default_threshold = Config().similarity_threshold
    report: dict[str, Any] = {
        "setup": {"data_manager": "manager_factory('sqlite,faiss')", "max_size": len(stored) + 1,
                  "eviction_params": {"max_size": len(stored) + 1},
                  "similarity_evaluation": "SearchDistanceEvaluation()",
                  "default_similarity_threshold": default_threshold, "top_k": "default"},
    }  # fmt: skip
    for name, threshold in (("default", default_threshold), ("nearest", 0.0)):
        cache = _cache(work_dir / name, vectors, len(stored), threshold)
        started = time.perf_counter()
        for index, text in enumerate(stored):
            put(text, f"q-{index}", cache_obj=cache)
        insert_s = time.perf_counter() - started
        num_indexed = cache.data_manager.v.count()  # all there: nothing evicted
        result = _lookups(cache, asked)
        latencies = result.pop("latency_ms")
        report[name] = result | {
            "threshold": threshold,
            "insert_s": round(insert_s, 2),
            "num_indexed": num_indexed,
        }
        if name == "default":
            report["lookup_ms"] = {
                "p50": round(float(np.percentile(latencies, 50)), 3),
                "p99": round(float(np.percentile(latencies, 99)), 3),
            }
        cache.flush()
    print(json.dumps(report))


if __name__ == "__main__":
    main()

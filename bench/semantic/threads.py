"""The e5 embedder's thread count: measured per batch (default) against a fixed one thread.

    python bench/semantic/threads.py [--num-texts 150]

For each setting, single questions from gptcache_mock_pairs (about 120 characters) are
embedded one at a time in three phases: the second core idle, the second core busy (a
spinning child process), idle again. Prints one summary line (p50 per phase and setting),
then JSON with p50/p99 and the thread count the tuner settled on per size bucket.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hasten.semantic.e5 import E5Embedder

DATA = Path("/work/shared/data/semcache/gptcache_mock_pairs.jsonl")
SETTLE_S = 0.5


def _phase(embedder: E5Embedder, texts: list[str]) -> dict[str, Any]:
    latencies = []
    for text in texts:
        started = time.perf_counter()
        embedder.embed([text])
        latencies.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
        "threads_by_bucket": embedder.tuner.best_counts(),
    }


def _run(num_threads: int, texts: list[str], num_texts: int) -> dict[str, Any]:
    embedder = E5Embedder(num_threads=num_threads)
    embedder.embed(["warm up"])
    report = {"idle": _phase(embedder, texts[:num_texts])}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(SETTLE_S)
        report["busy"] = _phase(embedder, texts[num_texts : 2 * num_texts])
    finally:
        hog.kill()
        hog.wait()
    time.sleep(SETTLE_S)
    report["idle_again"] = _phase(embedder, texts[2 * num_texts : 3 * num_texts])
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-texts", type=int, default=150, help="texts per phase")
    args = parser.parse_args()
    texts = [json.loads(line)["b"] for line in DATA.open(encoding="utf-8") if line.strip()]
    report = {
        "measured": _run(0, texts, args.num_texts),
        "one_thread": _run(1, texts, args.num_texts),
    }
    line = ", ".join(
        f"{name}: " + " / ".join(f"{phase} {row['p50_ms']}" for phase, row in phases.items())
        for name, phases in report.items()
    )
    print(f"e5 embedding p50 ms (idle / busy / idle again): {line}")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

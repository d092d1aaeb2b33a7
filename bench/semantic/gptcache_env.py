"""GPTCache beside hasten, on the same e5 vectors and under the same protocol-v2 scoring.

GPTCache lives in its own venv (``bench_venv``, pinned below; faiss-cpu and SQLAlchemy
pinned too, since GPTCache would otherwise pip-install them at import time). The vectors are
hasten's: this side embeds every text once with hasten's e5 embedder (the text hasten itself
embeds, ``split_chat``'s), writes them to an .npz, and ``gptcache_worker.py`` (beside this
file) runs GPTCache in that venv with an embedding function that reads them back. The worker reports
what GPTCache served and at what score; scoring is ``evaluate.metrics``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.semantic import evaluate
from bench.support.bench_venv import BenchVenv, VenvInstall
from bench.support.bench_venv import ensure_installed as _ensure_installed
from hasten.semantic.embedder import Embedder
from hasten.semantic.partition import split_chat

VENV = BenchVenv(
    "gptcache",
    requirements=("gptcache==0.1.44", "faiss-cpu==1.15.1", "sqlalchemy==2.0.36", "numpy==2.4.6"),
    distribution="gptcache",
)
WORKER = Path(__file__).resolve().parent / "gptcache_worker.py"
WORKER_TIMEOUT_S = 1800.0
# GPTCache's score with SearchDistanceEvaluation on faiss (squared L2 of unit vectors) is
# (4 - d) / 4 = (1 + cosine) / 2; its Config(similarity_threshold=0.8) default is cosine 0.6.
SWEEP_START = 0.8
SWEEP_STEP = 0.0025
MIN_SWEEP_HITS = 10  # max_precision: a precision over fewer hits is noise
TARGET_PRECISION = 0.95


def ensure_installed() -> VenvInstall:
    """Installs GPTCache into its venv unless already there; never raises for install trouble."""
    return _ensure_installed(VENV)


def _embedded_text(text: str) -> str:
    """What hasten's lookup and insert embed for a user question (whitespace collapsed)."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    query = split_chat(body, model="m", tenant="t")
    return text.strip() if query is None else query.text


def _write_inputs(path: Path, stored: Sequence[str], asked: Sequence[str], model: Embedder) -> None:
    texts = list(dict.fromkeys([*stored, *asked]))
    vectors = model.embed([_embedded_text(text) for text in texts])
    np.savez(path, texts=np.array(texts), vectors=np.asarray(vectors, dtype=np.float32))


def run_worker(
    stored: Sequence[str], asked: Sequence[str], model: Embedder, install: VenvInstall
) -> dict[str, Any]:
    """GPTCache's raw answers: per asked text, the stored index served (-1) and its score."""
    with tempfile.TemporaryDirectory(prefix="hasten-gptcache-") as directory:
        inputs = Path(directory) / "inputs.npz"
        _write_inputs(inputs, stored, asked, model)
        request = Path(directory) / "request.json"
        request.write_text(json.dumps({"stored": list(stored), "asked": list(asked)}))
        completed = subprocess.run(
            [str(VENV.python), str(WORKER), str(inputs), str(request), directory],
            check=True, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S,
        )  # fmt: skip
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    result["version"] = install.version
    return result


def _outcomes(
    stored: list[str], order: Sequence[int], served: Sequence[int], scores: Sequence[float | None]
) -> evaluate.Outcomes:
    return evaluate.Outcomes(
        stored=stored, rows=list(order), served=list(served), similarities=list(scores),
        risks=[None] * len(order),
    )  # fmt: skip


def _point(figures: dict[str, Any]) -> dict[str, Any]:
    keep = ("hits", "correct", "wrong", "false", "precision", "recall", "false_hit_rate")
    return {key: figures[key] for key in keep}


def compare(
    pairs: Sequence[evaluate.Pair], model: Embedder, install: VenvInstall
) -> dict[str, Any]:
    """GPTCache under protocol v2: its default threshold as run, and a threshold sweep."""
    stored = evaluate.stored_questions(pairs)
    order = [int(index) for index in np.random.default_rng(0).permutation(len(pairs))]
    raw = run_worker(stored, [pairs[index].b for index in order], model, install)
    default = _outcomes(stored, order, raw["default"]["served"], raw["default"]["scores"])
    nearest = _outcomes(stored, order, raw["nearest"]["served"], raw["nearest"]["scores"])
    sweep = []
    for threshold in np.arange(SWEEP_START, 1.0 + 1e-9, SWEEP_STEP):
        figures = evaluate.metrics(nearest, pairs, min_similarity=float(threshold) - 1e-9)
        cosine = 2 * float(threshold) - 1
        sweep.append({"threshold": round(float(threshold), 4), "cosine": round(cosine, 4)}
                     | _point(figures))  # fmt: skip
    # Any hits count here (the row shows how many): hasten's default is judged on its few too.
    reaching = [row for row in sweep if row["precision"] >= TARGET_PRECISION and row["hits"] > 0]
    best = max(reaching, key=lambda row: (row["recall"], -row["threshold"]), default=None)
    default_figures = evaluate.metrics(default, pairs)
    default_point = _point(default_figures)
    replayed = evaluate.metrics(nearest, pairs, min_similarity=raw["default"]["threshold"] - 1e-9)
    return {
        "version": raw["version"],
        "setup": raw["setup"]
        | {"num_stored": len(stored), "num_indexed": raw["default"]["num_indexed"]},
        "default": default_point
        | {"threshold": raw["default"]["threshold"], "v1": default_figures["v1"]},
        # The sweep replays the threshold-0 run; at the default it must match the real run.
        "is_sweep_consistent_with_default": _point(replayed) == default_point,
        f"best_at_precision_{TARGET_PRECISION}": best,
        "max_precision": max(
            (row for row in sweep if row["hits"] >= MIN_SWEEP_HITS),
            key=lambda row: (row["precision"], row["recall"]),
            default=None,
        ),
        "sweep": sweep,
        "lookup_ms_excluding_embedding": raw["lookup_ms"],
    }

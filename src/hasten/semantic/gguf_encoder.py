"""A GGUF text-embedding model run by llama.cpp: tokens in, one pooled unit vector out.

Runs only inside the child process of ``gguf_embedder``: a native fault here must not take
the gateway down. Uses llama.cpp's low-level API, as ``local.model`` does, because the model
is loaded without the CPU repack buffers (``use_extra_bufts = False``), which the high-level
``llama_cpp.Llama`` cannot ask for: quantised embedders crashed in ``llama_encode`` with
them on AMX CPUs (issue 14), and the portable engine build has no AMX kernels to gain.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# One batch holds at most this many texts and tokens; longer texts are cut to the window.
MAX_TEXTS_PER_BATCH = 16
MAX_TOKENS_PER_BATCH = 2048
MAX_TOKENS_PER_TEXT = 512


def quiet_native_logs() -> None:
    """llama.cpp's own messages (loading, quantising) go through this logger: errors only."""
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)


@dataclass(frozen=True, slots=True)
class EncoderParams:
    path: Path
    num_threads: int = 1
    # llama.cpp's repacked weight layouts: off, see the module's docstring (the tests turn
    # them on to check that the portable build computes the same vectors with them).
    has_repack_buffers: bool = False


class GgufEncoder:
    """A loaded embedding GGUF with one context; ``encode`` is not thread-safe."""

    def __init__(self, params: EncoderParams) -> None:
        import llama_cpp

        self._llama: Any = llama_cpp
        quiet_native_logs()
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.use_extra_bufts = params.has_repack_buffers
        self._model: Any = llama_cpp.llama_model_load_from_file(
            str(params.path).encode(), model_params
        )
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {params.path}")
        self._vocab: Any = llama_cpp.llama_model_get_vocab(self._model)
        self.dim = int(llama_cpp.llama_model_n_embd(self._model))
        self._is_encoder = bool(llama_cpp.llama_model_has_encoder(self._model))
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = MAX_TOKENS_PER_BATCH
        ctx_params.n_batch = MAX_TOKENS_PER_BATCH
        ctx_params.n_ubatch = MAX_TOKENS_PER_BATCH
        ctx_params.n_seq_max = MAX_TEXTS_PER_BATCH
        ctx_params.n_threads = params.num_threads
        ctx_params.n_threads_batch = params.num_threads
        ctx_params.embeddings = True
        ctx_params.kv_unified = True  # one window for the batch, not n_ctx / n_seq_max each
        ctx_params.no_perf = True
        self._ctx: Any = llama_cpp.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            raise RuntimeError("llama.cpp could not create an embedding context")
        if llama_cpp.llama_pooling_type(self._ctx) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            raise RuntimeError(f"{params.path.name} has no pooling: not a sentence embedder")
        self._batch: Any = llama_cpp.llama_batch_init(MAX_TOKENS_PER_BATCH, 0, 1)

    def close(self) -> None:
        llama = self._llama
        if self._ctx:
            llama.llama_batch_free(self._batch)
            llama.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama.llama_model_free(self._model)
            self._model = None

    def tokenize(self, text: str) -> list[int]:
        """The text's tokens with the model's special tokens, cut to the window."""
        data = text.encode()
        capacity = len(data) + 8
        buffer = (self._llama.llama_token * capacity)()
        count = self._llama.llama_tokenize(
            self._vocab, data, len(data), buffer, capacity, True, False
        )
        if count < 0:
            raise ValueError(f"tokenization needs {-count} tokens, more than {capacity}")
        return list(buffer[: min(count, MAX_TOKENS_PER_TEXT)])

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One L2-normalised row per text, in order."""
        rows = np.empty((len(texts), self.dim), dtype=np.float32)
        pending: list[tuple[int, list[int]]] = []
        num_tokens = 0
        for index, text in enumerate(texts):
            tokens = self.tokenize(text)
            if pending and (
                len(pending) == MAX_TEXTS_PER_BATCH
                or num_tokens + len(tokens) > MAX_TOKENS_PER_BATCH
            ):
                self._run(pending, rows)
                pending, num_tokens = [], 0
            pending.append((index, tokens))
            num_tokens += len(tokens)
        if pending:
            self._run(pending, rows)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        rows /= np.maximum(norms, 1e-12)
        return rows

    def _run(self, items: Sequence[tuple[int, list[int]]], rows: npt.NDArray[np.float32]) -> None:
        llama, batch = self._llama, self._batch
        position = 0
        for seq_id, (_, tokens) in enumerate(items):
            for offset, token_id in enumerate(tokens):
                batch.token[position] = token_id
                batch.pos[position] = offset
                batch.n_seq_id[position] = 1
                batch.seq_id[position][0] = seq_id
                batch.logits[position] = True
                position += 1
        batch.n_tokens = position
        memory = llama.llama_get_memory(self._ctx)
        if memory:  # encoder-only models keep none
            llama.llama_memory_clear(memory, True)
        run = llama.llama_encode if self._is_encoder else llama.llama_decode
        status = run(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama.cpp failed to embed a batch (status {status})")
        for seq_id, (index, _) in enumerate(items):
            pointer = llama.llama_get_embeddings_seq(self._ctx, seq_id)
            if not pointer:
                raise RuntimeError("llama.cpp returned no pooled embedding")
            rows[index] = np.ctypeslib.as_array(pointer, shape=(self.dim,))

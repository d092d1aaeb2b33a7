"""Executes a scheduler ``StepPlan`` on llama.cpp: KV operations, one batched decode, sampling.

Owns the llama context and the batch buffer; must only be used from the engine thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import llama_cpp
import numpy as np

from hasten.errors import DecodeError
from hasten.local.model import ContextParams, LocalModel
from hasten.local.sampling import TokenSampler, sample_rows
from hasten.local.scheduler import Chunk, KvCopy, KvRemove, Sequence, StepPlan
from hasten.local.threads import StepMode

# llama_decode's "no free KV cells for this batch": recoverable by evicting cached prefixes.
DECODE_NO_KV_SLOT = 1


@dataclass(frozen=True, slots=True)
class StepResult:
    """The token sampled for each chunk that asked for logits, and what the decode cost."""

    sampled: list[tuple[Sequence, int]]
    elapsed_s: float = 0.0


class Runner:
    """One llama context whose unified KV cache holds ``params.n_seq_max`` sequences."""

    def __init__(self, model: LocalModel, params: ContextParams) -> None:
        self.model = model
        self.params = params
        self._ctx: Any = model.create_context(params)
        self._memory: Any = llama_cpp.llama_get_memory(self._ctx)
        self._batch: Any = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._is_closed = False
        self._num_threads = 0

    def close(self) -> None:
        if self._is_closed:
            return
        self._is_closed = True
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)

    def execute(
        self, plan: StepPlan, samplers: Mapping[int, TokenSampler], mode: StepMode | None = None
    ) -> StepResult:
        """Runs the plan in ``mode`` (None: the context's own thread counts) and samples.

        ``elapsed_s`` covers decoding and sampling: a split step samples row by row.
        """
        self._apply_kv_ops(plan)
        if not plan.chunks:
            return StepResult([])
        mode = mode or StepMode(0)
        if mode.num_threads > 0 and mode.num_threads != self._num_threads:
            llama_cpp.llama_set_n_threads(self._ctx, mode.num_threads, mode.num_threads)
            self._num_threads = mode.num_threads
        started_s = time.perf_counter()
        if not mode.is_split:
            sampled = self._decode_and_sample(plan.chunks, samplers)
            return StepResult(sampled, time.perf_counter() - started_s)
        sampled = []
        try:
            for chunk in plan.chunks:
                sampled += self._decode_and_sample([chunk], samplers)
        except DecodeError:
            # Undo the chunks that did land, so the step can be planned again unchanged.
            for chunk in plan.chunks:
                llama_cpp.llama_memory_seq_rm(self._memory, chunk.seq_id, chunk.start_pos, -1)
            raise
        return StepResult(sampled, time.perf_counter() - started_s)

    def clear(self) -> None:
        """Forgets every sequence's KV (after a failed decode left it unknown)."""
        llama_cpp.llama_memory_clear(self._memory, False)

    def _apply_kv_ops(self, plan: StepPlan) -> None:
        for op in plan.kv_ops:
            if isinstance(op, KvRemove):
                llama_cpp.llama_memory_seq_rm(self._memory, op.seq_id, op.start_pos, -1)
            elif isinstance(op, KvCopy):
                llama_cpp.llama_memory_seq_cp(
                    self._memory, op.src_seq_id, op.dst_seq_id, 0, op.num_tokens
                )

    def _decode_and_sample(
        self, chunks: list[Chunk], samplers: Mapping[int, TokenSampler]
    ) -> list[tuple[Sequence, int]]:
        output_rows = self._fill_batch(chunks)
        code = int(llama_cpp.llama_decode(self._ctx, self._batch))
        if code != 0:
            raise DecodeError(code)
        if not output_rows:
            return []
        # Outputs are stored in batch order, one vocabulary-wide row per logits flag.
        pointer = llama_cpp.llama_get_logits(self._ctx)
        logits = np.ctypeslib.as_array(pointer, shape=(len(output_rows), self.model.num_vocab))
        sequences = [sequence for sequence, _ in output_rows]
        tokens = sample_rows(logits, [samplers[seq.request_id] for seq in sequences])
        return list(zip(sequences, tokens, strict=True))

    def _fill_batch(self, chunks: list[Chunk]) -> list[tuple[Sequence, int]]:
        num_tokens = sum(len(chunk.token_ids) for chunk in chunks)
        if num_tokens > self.params.n_batch:
            raise ValueError(f"step of {num_tokens} tokens exceeds n_batch={self.params.n_batch}")
        batch = self._batch
        row = 0
        output_rows: list[tuple[Sequence, int]] = []
        for chunk in chunks:
            last = len(chunk.token_ids) - 1
            for offset, token_id in enumerate(chunk.token_ids):
                batch.token[row] = token_id
                batch.pos[row] = chunk.start_pos + offset
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = chunk.seq_id
                wants_logits = chunk.wants_logits and offset == last
                batch.logits[row] = wants_logits
                if wants_logits:
                    output_rows.append((chunk.sequence, row))
                row += 1
        batch.n_tokens = row
        return output_rows

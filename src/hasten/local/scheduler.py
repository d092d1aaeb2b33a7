"""Decides what the engine does next: admission, prefix reuse, and the next batch.

Pure bookkeeping, no llama.cpp: it hands the runner a ``StepPlan`` (KV-cache operations,
then token chunks per sequence) and is told what happened afterwards.

Model: the KV cache is unified, with ``max_seqs + num_cache_slots`` llama sequence ids
("slots"). A running request owns one slot; a finished request leaves its slot's KV behind
so a later request sharing a prefix (system prompt, earlier turns) only computes the rest,
either in that slot or by copying the prefix from any slot with ``seq_cp`` (shared cells,
no compute). Every admitted request reserves KV cells for its whole prompt and
``max_new_tokens`` up front, so a new request can never starve a running one.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from hasten.errors import ContextTooLong, QueueFull


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class Slot:
    """One llama.cpp sequence id and the tokens whose KV it holds at positions 0..n-1."""

    seq_id: int
    cached_ids: list[int] = field(default_factory=list)
    owner: Sequence | None = None
    last_used_step: int = -1
    # Leading cells obtained by seq_cp from ``shared_from``: counted by that slot, not this.
    num_shared: int = 0
    shared_from: Slot | None = None


@dataclass(eq=False, slots=True)
class Sequence:
    """One request as the scheduler sees it: tokens in, tokens out, where its KV lives."""

    request_id: int
    prompt_ids: list[int]
    max_new_tokens: int
    token_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    slot: Slot | None = None
    num_reused: int = 0

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_ids)

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - len(self.prompt_ids)

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_ids) + self.max_new_tokens


@dataclass(frozen=True, slots=True)
class KvRemove:
    """Drop ``seq_id``'s cells from position ``start_pos`` on."""

    seq_id: int
    start_pos: int


@dataclass(frozen=True, slots=True)
class KvCopy:
    """Share ``src_seq_id``'s cells at positions [0, num_tokens) with ``dst_seq_id``."""

    src_seq_id: int
    dst_seq_id: int
    num_tokens: int


KvOp = KvRemove | KvCopy


@dataclass(frozen=True, slots=True)
class Chunk:
    """Tokens of one sequence to feed this step, starting at KV position ``start_pos``."""

    sequence: Sequence
    seq_id: int
    token_ids: list[int]
    start_pos: int
    wants_logits: bool


@dataclass(frozen=True, slots=True)
class StepPlan:
    kv_ops: list[KvOp]
    chunks: list[Chunk]

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.kv_ops


def common_prefix_len(left: list[int], right: list[int]) -> int:
    limit = min(len(left), len(right))
    index = 0
    while index < limit and left[index] == right[index]:
        index += 1
    return index


class Scheduler:
    """FCFS admission into slots under a KV budget; decodes first, then one chunked prefill."""

    def __init__(
        self,
        *,
        max_seqs: int,
        max_queue: int,
        max_kv_tokens: int,
        max_step_tokens: int,
        num_cache_slots: int = 4,
    ) -> None:
        if max_seqs < 1 or max_step_tokens < max_seqs:
            raise ValueError("need max_seqs >= 1 and max_step_tokens >= max_seqs")
        self.max_seqs = max_seqs
        self.max_queue = max_queue
        self.max_kv_tokens = max_kv_tokens
        self.max_step_tokens = max_step_tokens
        self.slots = [Slot(seq_id) for seq_id in range(max_seqs + num_cache_slots)]
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._step = 0
        self._pending_ops: list[KvOp] = []

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    def add(self, sequence: Sequence) -> None:
        if sequence.max_total_tokens > self.max_kv_tokens:
            raise ContextTooLong(
                f"prompt ({len(sequence.prompt_ids)} tokens) plus max_tokens "
                f"({sequence.max_new_tokens}) exceeds the context of {self.max_kv_tokens} tokens"
            )
        # Counted against the total so that max_queue=0 still admits into free slots.
        if len(self.waiting) + len(self.running) >= self.max_seqs + self.max_queue:
            raise QueueFull(f"{len(self.waiting)} requests already waiting")
        self.waiting.append(sequence)

    def finish(self, sequence: Sequence) -> None:
        """Ends a sequence (done or cancelled): its slot is free at once, its KV kept."""
        if sequence.status is Status.WAITING:
            self.waiting.remove(sequence)
        elif sequence.status is Status.RUNNING:
            self.running.remove(sequence)
            slot = sequence.slot
            assert slot is not None
            slot.owner = None
            slot.last_used_step = self._step
        sequence.status = Status.FINISHED

    def schedule(self) -> StepPlan:
        self._step += 1
        self._admit()
        chunks = self._chunks()
        ops, self._pending_ops = self._pending_ops, []
        return StepPlan(ops, chunks)

    def complete(self, plan: StepPlan) -> None:
        """Records that the plan's chunks are now in the KV cache."""
        for chunk in plan.chunks:
            slot = chunk.sequence.slot
            if chunk.sequence.status is Status.RUNNING and slot is not None:
                slot.cached_ids.extend(chunk.token_ids)

    def evict_free_caches(self) -> bool:
        """Drops the KV of every slot no request owns; False when there was none."""
        evicted = False
        for slot in self.slots:
            if slot.owner is None and slot.cached_ids:
                self._truncate(slot, 0)
                evicted = True
        return evicted

    def forget_kv(self) -> None:
        """The KV cache was wiped: running sequences recompute everything they had."""
        self._pending_ops.clear()
        for slot in self.slots:
            slot.cached_ids = []
            slot.num_shared, slot.shared_from = 0, None

    def used_kv_tokens(self) -> int:
        """Upper bound of KV cells in use or reserved by running sequences."""
        cells = sum(len(slot.cached_ids) - slot.num_shared for slot in self.slots)
        growth = sum(
            seq.max_total_tokens - len(seq.slot.cached_ids)
            for seq in self.running
            if seq.slot is not None
        )
        return cells + growth

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_seqs:
            # Prefills run one at a time anyway (see _chunks); admitting the next request
            # only once the current prefill is done lets it copy that prompt's prefix,
            # so concurrent requests with one system prompt compute it once.
            if any(self._num_pending(seq) > 1 for seq in self.running):
                return
            sequence = self.waiting[0]
            if not self._place(sequence):
                return  # FCFS: later requests wait behind the head rather than overtake it
            self.waiting.popleft()
            sequence.status = Status.RUNNING
            self.running.append(sequence)

    def _place(self, sequence: Sequence) -> bool:
        prompt = sequence.prompt_ids
        # At least one prompt token must be computed to get logits for the first output.
        max_reuse = len(prompt) - 1
        target = self._pick_free_slot(prompt)
        own_len = min(common_prefix_len(target.cached_ids, prompt), max_reuse)
        source, source_len = self._best_source(prompt, max_reuse, exclude=target)
        if source is not None and source_len > own_len:
            self._truncate(target, 0)
            reused = source_len
        else:
            self._truncate(target, own_len)
            reused, source = own_len, None
        if not self._fits(sequence, reused, keep=(target, source)):
            return False
        # Always clear the tail: a step that ran after a cancellation may have left cells
        # beyond what the slot records.
        self._pending_ops.append(KvRemove(target.seq_id, reused if source is None else 0))
        if source is not None:
            self._pending_ops.append(KvCopy(source.seq_id, target.seq_id, reused))
            target.cached_ids = prompt[:reused]
            target.num_shared, target.shared_from = reused, source
        target.owner = sequence
        target.last_used_step = self._step
        sequence.slot, sequence.num_reused = target, reused
        return True

    def _fits(self, sequence: Sequence, reused: int, keep: tuple[Slot, Slot | None]) -> bool:
        needed = sequence.max_total_tokens - reused
        if self.used_kv_tokens() + needed <= self.max_kv_tokens:
            return True
        victims = sorted(
            (slot for slot in self.slots if slot.owner is None and slot.cached_ids),
            key=lambda slot: slot.last_used_step,
        )
        for victim in victims:
            if victim in keep:
                continue
            self._truncate(victim, 0)
            if self.used_kv_tokens() + needed <= self.max_kv_tokens:
                return True
        return False

    def _pick_free_slot(self, prompt: list[int]) -> Slot:
        """The free slot with the longest matching cache, else the least recently used."""
        free = [slot for slot in self.slots if slot.owner is None]
        return max(
            free,
            key=lambda slot: (common_prefix_len(slot.cached_ids, prompt), -slot.last_used_step),
        )

    def _best_source(
        self, prompt: list[int], max_reuse: int, exclude: Slot
    ) -> tuple[Slot | None, int]:
        best: Slot | None = None
        best_len = 0
        for slot in self.slots:
            if slot is exclude:
                continue
            length = min(common_prefix_len(slot.cached_ids, prompt), max_reuse)
            if length > best_len:
                best, best_len = slot, length
        return best, best_len

    def _truncate(self, slot: Slot, start_pos: int) -> None:
        if start_pos >= len(slot.cached_ids):
            return
        self._pending_ops.append(KvRemove(slot.seq_id, start_pos))
        del slot.cached_ids[start_pos:]
        slot.num_shared = min(slot.num_shared, start_pos)
        if slot.num_shared == 0:
            slot.shared_from = None
        # Cells this slot computed may live on in slots that copied them: count them there.
        for other in self.slots:
            if other.shared_from is slot:
                other.num_shared = min(other.num_shared, start_pos)
                if other.num_shared == 0:
                    other.shared_from = None

    def _chunks(self) -> list[Chunk]:
        """Every decoding sequence gets its one token; then one prefill takes what is left.

        Only one multi-token chunk per step: with a unified KV cache, llama.cpp (flash
        attention on CPU) computes wrong logits when a ubatch holds several sequences of
        several tokens each, while any number of single-token sequences beside one
        multi-token chunk is exact.
        """
        budget = self.max_step_tokens
        decoding = [seq for seq in self.running if self._num_pending(seq) == 1]
        prefilling = [seq for seq in self.running if self._num_pending(seq) > 1]
        chunks: list[Chunk] = []
        for sequence in decoding + prefilling[:1]:
            if budget <= 0:
                break
            slot = sequence.slot
            assert slot is not None
            start = len(slot.cached_ids)
            pending = sequence.token_ids[start:]
            taken = pending[:budget]
            budget -= len(taken)
            chunks.append(Chunk(sequence, slot.seq_id, taken, start, len(taken) == len(pending)))
        return chunks

    @staticmethod
    def _num_pending(sequence: Sequence) -> int:
        assert sequence.slot is not None
        return len(sequence.token_ids) - len(sequence.slot.cached_ids)

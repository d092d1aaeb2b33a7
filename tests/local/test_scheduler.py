"""Unit tests for hasten.local.scheduler: admission, chunked prefill, prefix reuse, KV budget."""

from __future__ import annotations

import pytest

from hasten.errors import ContextTooLong, QueueFull
from hasten.local.scheduler import (
    KvCopy,
    KvRemove,
    Scheduler,
    Sequence,
    Status,
    StepPlan,
    common_prefix_len,
)


def _scheduler(**overrides: int) -> Scheduler:
    settings = {"max_seqs": 2, "max_queue": 2, "max_kv_tokens": 1000, "max_step_tokens": 16}
    settings.update(overrides)
    return Scheduler(**settings)


def _run_step(scheduler: Scheduler, next_token: int = 99) -> StepPlan:
    """Plans a step, pretends it ran, and appends a token for each finished prefill."""
    plan = scheduler.schedule()
    scheduler.complete(plan)
    for chunk in plan.chunks:
        if chunk.wants_logits:
            chunk.sequence.token_ids.append(next_token)
    return plan


def _status(sequence: Sequence) -> Status:
    """Read through a call: mypy keeps ``sequence.status`` narrowed by an earlier assert
    across the scheduler calls that change it."""
    return sequence.status


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_len([], [1]) == 0


def test_admits_up_to_max_seqs_and_queues_the_rest() -> None:
    scheduler = _scheduler(max_queue=1)
    sequences = [Sequence(i, [i * 10 + 1, 2], 4) for i in range(3)]
    for sequence in sequences:
        scheduler.add(sequence)
    _run_step(scheduler)
    _run_step(scheduler)
    assert [seq.status for seq in sequences] == [Status.RUNNING, Status.RUNNING, Status.WAITING]
    assert sequences[0].slot is not sequences[1].slot


def test_queue_full_and_context_too_long() -> None:
    scheduler = _scheduler(max_seqs=1, max_queue=1, max_kv_tokens=10)
    scheduler.add(Sequence(1, [1, 2], 4))
    scheduler.schedule()
    scheduler.add(Sequence(2, [1, 2], 4))
    with pytest.raises(QueueFull):
        scheduler.add(Sequence(5, [1, 2], 4))
    with pytest.raises(ContextTooLong):
        scheduler.add(Sequence(3, [1] * 8, 4))


def test_decodes_go_first_and_prefill_is_chunked_to_the_step_budget() -> None:
    scheduler = _scheduler(max_step_tokens=8)
    short = Sequence(1, [1, 2, 3], 10)
    scheduler.add(short)
    _run_step(scheduler)  # short's prompt in one chunk, first token sampled
    long = Sequence(2, list(range(100, 120)), 4)
    scheduler.add(long)
    plan = _run_step(scheduler)
    assert [(c.sequence.request_id, len(c.token_ids)) for c in plan.chunks] == [(1, 1), (2, 7)]
    assert not plan.chunks[1].wants_logits
    assert plan.chunks[0].start_pos == 3
    plan = _run_step(scheduler)
    assert plan.chunks[1].start_pos == 7
    _run_step(scheduler)
    plan = _run_step(scheduler)  # 20 prompt tokens: 7 + 7 + 6
    assert [len(c.token_ids) for c in plan.chunks] == [1, 1]


def test_finished_slot_is_reused_for_a_shared_prefix() -> None:
    scheduler = _scheduler()
    first = Sequence(1, [1, 2, 3, 4, 5], 4)
    scheduler.add(first)
    _run_step(scheduler)
    scheduler.finish(first)
    second = Sequence(2, [1, 2, 3, 9], 4)
    scheduler.add(second)
    plan = scheduler.schedule()
    assert second.num_reused == 3
    assert second.slot is not None and second.slot is first.slot
    assert KvRemove(second.slot.seq_id, 3) in plan.kv_ops
    assert [(c.token_ids, c.start_pos) for c in plan.chunks] == [([9], 3)]


def test_running_sequence_shares_its_prefix_with_seq_cp() -> None:
    scheduler = _scheduler()
    system = list(range(1, 11))
    first = Sequence(1, [*system, 50], 4)
    scheduler.add(first)
    _run_step(scheduler)
    second = Sequence(2, [*system, 60, 61], 4)
    scheduler.add(second)
    plan = scheduler.schedule()
    assert first.slot is not None and second.slot is not None
    assert KvCopy(first.slot.seq_id, second.slot.seq_id, 10) in plan.kv_ops
    assert second.num_reused == 10
    prefill = next(c for c in plan.chunks if c.sequence is second)
    assert (prefill.token_ids, prefill.start_pos) == ([60, 61], 10)
    # Shared cells are counted once: first's 11 + reservations, second adds only its own.
    assert scheduler.used_kv_tokens() == 15 + (16 - 10)


def test_whole_prompt_cached_still_computes_its_last_token() -> None:
    scheduler = _scheduler()
    first = Sequence(1, [1, 2, 3], 2)
    scheduler.add(first)
    _run_step(scheduler)
    scheduler.finish(first)
    again = Sequence(2, [1, 2, 3], 2)
    scheduler.add(again)
    plan = scheduler.schedule()
    assert again.num_reused == 2
    assert [(c.token_ids, c.start_pos, c.wants_logits) for c in plan.chunks] == [([3], 2, True)]


def test_kv_budget_evicts_free_caches_but_never_running_reservations() -> None:
    scheduler = _scheduler(max_kv_tokens=40, max_seqs=2)
    old = Sequence(1, list(range(100, 120)), 5)
    scheduler.add(old)
    _run_step(scheduler)
    _run_step(scheduler)
    scheduler.finish(old)  # leaves 20 cached cells behind
    running = Sequence(2, [1, 2, 3], 10)
    scheduler.add(running)
    _run_step(scheduler)
    assert scheduler.used_kv_tokens() == 20 + 13
    big = Sequence(3, [7, 8, 9], 20)  # needs 23: fits only once the old cache is gone
    scheduler.add(big)
    plan = scheduler.schedule()
    assert big.status is Status.RUNNING
    assert old.slot is not None
    assert KvRemove(old.slot.seq_id, 0) in plan.kv_ops
    assert scheduler.used_kv_tokens() <= 40
    huge = Sequence(4, [5, 6], 30)
    scheduler.finish(big)
    scheduler.add(huge)  # 32 > 40 - 13 reserved by the running request: must wait
    scheduler.schedule()
    assert huge.status is Status.WAITING
    scheduler.finish(running)
    scheduler.schedule()
    assert _status(huge) is Status.RUNNING


def test_cancel_frees_the_slot_for_the_next_request() -> None:
    scheduler = _scheduler(max_seqs=1)
    first, second = Sequence(1, [1, 2], 100), Sequence(2, [3, 4], 5)
    scheduler.add(first)
    scheduler.add(second)
    _run_step(scheduler)
    assert second.status is Status.WAITING
    scheduler.finish(first)
    plan = scheduler.schedule()
    assert [c.sequence for c in plan.chunks] == [second]


def test_evicting_a_copy_source_moves_the_count_to_the_copy() -> None:
    scheduler = _scheduler(max_seqs=2)
    first = Sequence(1, [1, 2, 3, 4, 5], 1)
    scheduler.add(first)
    _run_step(scheduler)
    scheduler.finish(first)
    second = Sequence(2, [1, 2, 3, 4, 5, 6], 1)
    third = Sequence(3, [1, 2, 3, 4, 7], 1)
    scheduler.add(second)
    scheduler.add(third)
    plan = _run_step(scheduler)
    assert any(isinstance(op, KvCopy) for op in plan.kv_ops)
    before = scheduler.used_kv_tokens()
    scheduler.finish(second)
    scheduler.finish(third)
    assert scheduler.evict_free_caches()
    assert scheduler.used_kv_tokens() == 0 < before


def test_at_most_one_multi_token_chunk_per_step() -> None:
    scheduler = _scheduler(max_seqs=3, max_queue=3, max_step_tokens=64)
    sequences = [Sequence(i, [i * 100 + k for k in range(5)], 3) for i in range(3)]
    for sequence in sequences:
        scheduler.add(sequence)
    plans = [_run_step(scheduler) for _ in range(3)]
    assert [[c.sequence.request_id for c in plan.chunks] for plan in plans] == [
        [0],
        [0, 1],
        [0, 1, 2],
    ]
    for plan in plans:
        assert sum(len(c.token_ids) > 1 for c in plan.chunks) <= 1


def test_concurrent_requests_with_one_system_prompt_compute_it_once() -> None:
    scheduler = _scheduler(max_seqs=3, max_queue=3, max_step_tokens=64)
    system = list(range(1000, 1040))
    sequences = [Sequence(i, [*system, i], 2) for i in range(3)]
    for sequence in sequences:
        scheduler.add(sequence)
    computed = sum(len(c.token_ids) for _ in range(4) for c in _run_step(scheduler).chunks)
    assert [seq.num_reused for seq in sequences] == [0, 40, 40]
    assert computed < 41 + 2 * 3 + 8

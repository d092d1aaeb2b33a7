"""Pure parts of the local engine: sampling, stop handling, scheduling, wire format, config."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hasten.errors import ConfigError, InvalidRequest
from hasten.local.config import EngineConfig, parse_local_table
from hasten.local.protocol import parse_chat_request
from hasten.local.sampling import SamplingParams, TokenSampler
from hasten.local.scheduler import (
    ContextTooLong,
    KvCopy,
    KvRemove,
    QueueFull,
    Scheduler,
    Sequence,
    Status,
    StepPlan,
    common_prefix_len,
)
from hasten.local.server import add_arguments, resolve_config
from hasten.local.textstream import TextStream

# --- sampling ---------------------------------------------------------------------------


def _logits(values: list[float]) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_zero_temperature_is_greedy() -> None:
    sampler = TokenSampler.from_params(SamplingParams(temperature=0.0))
    assert sampler.sample(_logits([0.1, 3.0, 2.9, -1.0])) == 1


def test_same_seed_same_tokens_and_seeds_differ() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)

    def draw(seed: int) -> list[int]:
        sampler = TokenSampler.from_params(SamplingParams(temperature=1.0, seed=seed))
        return [sampler.sample(logits) for _ in range(20)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_top_p_keeps_only_the_nucleus() -> None:
    # Probabilities ~ [0.64, 0.24, 0.09, 0.03]: top_p=0.5 leaves only the best token.
    logits = np.log(np.array([0.64, 0.24, 0.09, 0.03])).astype(np.float32)
    sampler = TokenSampler.from_params(SamplingParams(temperature=1.0, top_p=0.5, seed=1))
    assert {sampler.sample(logits) for _ in range(200)} == {0}
    sampler = TokenSampler.from_params(SamplingParams(temperature=1.0, top_p=0.8, seed=1))
    assert {sampler.sample(logits) for _ in range(400)} == {0, 1}


def test_top_p_over_a_large_vocabulary_uses_the_partial_sort_correctly() -> None:
    logits = np.full(50_000, -10.0, dtype=np.float32)
    logits[[5, 40_000]] = [5.0, 4.9]
    sampler = TokenSampler.from_params(SamplingParams(temperature=1.0, top_p=0.9, seed=3))
    assert {sampler.sample(logits) for _ in range(300)} == {5, 40_000}


def test_temperature_sampling_follows_the_distribution() -> None:
    logits = np.log(np.array([0.7, 0.3])).astype(np.float32)
    sampler = TokenSampler.from_params(SamplingParams(temperature=1.0, seed=11))
    draws = [sampler.sample(logits) for _ in range(4000)]
    assert 0.66 < draws.count(0) / len(draws) < 0.74


# --- stop sequences and UTF-8 ------------------------------------------------------------


def test_text_stream_holds_back_a_possible_stop_then_releases_it() -> None:
    stream = TextStream(("END",))
    assert stream.feed(b"hello E").text == "hello "
    delta = stream.feed(b"x")
    assert (delta.text, delta.is_stopped) == ("Ex", False)


def test_text_stream_stops_across_tokens_and_drops_the_stop() -> None:
    stream = TextStream(("\n\n", "END"))
    texts = [stream.feed(piece) for piece in (b"one E", b"N", b"D and more")]
    assert "".join(delta.text for delta in texts) == "one "
    assert texts[-1].is_stopped
    assert stream.feed(b"more").text == ""
    assert stream.finish() == ""


def test_text_stream_joins_split_utf8_and_flushes_at_the_end() -> None:
    stream = TextStream(("zz",))
    encoded = "née z".encode()
    out = [stream.feed(encoded[:2]).text, stream.feed(encoded[2:]).text]
    assert "".join(out) + stream.finish() == "née z"


# --- scheduler -------------------------------------------------------------------------


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


# --- wire format and config ---------------------------------------------------------------


def test_parse_chat_request_reads_sampling_fields() -> None:
    request = parse_chat_request(
        {
            "model": "local",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "temperature": 0,
            "top_p": 0.5,
            "max_tokens": 7,
            "stop": "x",
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert request.messages == [{"role": "user", "content": "hi"}]
    assert request.sampling == SamplingParams(0.0, 0.5, 7, ("x",), 3)
    assert request.is_stream and request.includes_usage


@pytest.mark.parametrize(
    "change",
    [
        {"messages": []},
        {"temperature": 3},
        {"top_p": 0},
        {"max_tokens": 0},
        {"stop": ["a", "b", "c", "d", "e"]},
        {"n": 2},
        {"seed": "x"},
        {"messages": [{"role": "robot", "content": "x"}]},
    ],
)
def test_parse_chat_request_rejects_bad_fields(change: dict[str, object]) -> None:
    body = {"model": "local", "messages": [{"role": "user", "content": "hi"}], **change}
    with pytest.raises(InvalidRequest):
        parse_chat_request(body)


def test_local_config_table() -> None:
    config = parse_local_table({"port": 9000, "n_ctx": 2048, "model_path": "/m.gguf"})
    assert config.port == 9000 and config.engine.n_ctx == 2048
    assert str(config.engine.model_path) == "/m.gguf"
    with pytest.raises(ConfigError):
        parse_local_table({"bogus": 1})
    with pytest.raises(ConfigError):
        EngineConfig(max_seqs=0).check()


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


def test_server_flags_override_the_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "hasten.toml"
    config_file.write_text("[local]\nport = 9100\nn_ctx = 2048\nmax_seqs = 2\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--config", str(config_file), "--max-seqs", "4"])
    config = resolve_config(args)
    assert (config.host, config.port) == ("127.0.0.1", 9100)
    assert (config.engine.n_ctx, config.engine.max_seqs) == (2048, 4)
    defaults = resolve_config(parser.parse_args([]))
    assert defaults.port == 8091 and defaults.engine.model_path is None


def test_server_run_fails_cleanly_without_a_model(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    command = [sys.executable, "-m", "hasten", "local", "--model-path", str(missing)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "GGUF model not found" in done.stderr and str(missing) in done.stderr


def test_concurrent_requests_with_one_system_prompt_compute_it_once() -> None:
    scheduler = _scheduler(max_seqs=3, max_queue=3, max_step_tokens=64)
    system = list(range(1000, 1040))
    sequences = [Sequence(i, [*system, i], 2) for i in range(3)]
    for sequence in sequences:
        scheduler.add(sequence)
    computed = sum(len(c.token_ids) for _ in range(4) for c in _run_step(scheduler).chunks)
    assert [seq.num_reused for seq in sequences] == [0, 40, 40]
    assert computed < 41 + 2 * 3 + 8

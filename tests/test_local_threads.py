"""The thread tuner (pure) and batched sampling across rows."""

from __future__ import annotations

import numpy as np

from hasten.local.sampling import SamplingParams, TokenSampler, sample_rows
from hasten.local.threads import ThreadTuner


def _run(tuner: ThreadTuner, num_tokens: int, cost_s: dict[int, float], steps: int) -> list[int]:
    chosen = []
    for _ in range(steps):
        threads = tuner.choose(num_tokens)
        tuner.record(num_tokens, threads, cost_s[threads] * num_tokens)
        chosen.append(threads)
    return chosen


def test_fixed_counts_when_probing_is_off() -> None:
    tuner = ThreadTuner(max_threads=2, single_token_threads=1, probe_every_steps=0)
    assert tuner.choose(1) == 1 and tuner.choose(8) == 2


def test_tuner_moves_to_the_faster_count_and_rarely_probes_the_slower() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4, max_probe_every_steps=64)
    chosen = _run(tuner, 8, {1: 0.006, 2: 0.003}, 200)
    assert chosen[0] == 1 and chosen[-1] == 2
    assert chosen[20:].count(1) <= 4  # backed off: the losing count is tried ever more rarely
    assert tuner.best_threads() == {4: 2}


def test_tuner_follows_a_change_of_load() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4, max_probe_every_steps=16)
    _run(tuner, 8, {1: 0.006, 2: 0.003}, 50)
    chosen = _run(tuner, 8, {1: 0.006, 2: 0.100}, 20)  # another process takes a core
    assert chosen[2:].count(1) >= 16


def test_buckets_are_independent() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4)
    assert set(_run(tuner, 1, {1: 0.006, 2: 0.001}, 50)) == {1}  # lone tokens: fixed
    _run(tuner, 2, {1: 0.006, 2: 0.012}, 50)
    _run(tuner, 8, {1: 0.006, 2: 0.003}, 50)
    assert tuner.best_threads() == {1: 1, 2: 1, 4: 2}


def test_sample_rows_matches_each_requests_own_sampler() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 1000)).astype(np.float32)
    params = [SamplingParams(temperature=0.0), SamplingParams(seed=5), SamplingParams(top_p=0.9)]
    batched = [TokenSampler.from_params(p) for p in params[:2]]
    alone = [TokenSampler.from_params(p) for p in params[:2]]
    rows = [sample_rows(logits[:2], batched) for _ in range(10)]
    assert [row[0] for row in rows] == [int(np.argmax(logits[0]))] * 10
    assert [row[1] for row in rows] == [alone[1].sample(logits[1]) for _ in range(10)]
    nucleus = TokenSampler.from_params(SamplingParams(top_p=0.9, seed=1))
    assert 0 <= sample_rows(logits, [*batched, nucleus])[2] < 1000

"""Unit tests for hasten.local.sampling: greedy, seeded, nucleus and batched sampling."""

from __future__ import annotations

import numpy as np

from hasten.local.sampling import SamplingParams, TokenSampler, sample_rows


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


def test_sample_rows_matches_each_requests_own_sampler() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 1000)).astype(np.float32)
    params = [SamplingParams(temperature=0.0), SamplingParams(seed=5)]
    batched = [TokenSampler.from_params(p) for p in params]
    alone = [TokenSampler.from_params(p) for p in params]
    rows = [sample_rows(logits[:2], batched) for _ in range(10)]
    assert [row[0] for row in rows] == [int(np.argmax(logits[0]))] * 10
    assert [row[1] for row in rows] == [alone[1].sample(logits[1]) for _ in range(10)]
    nucleus = TokenSampler.from_params(SamplingParams(top_p=0.9, seed=1))
    assert 0 <= sample_rows(logits, [*batched, nucleus])[2] < 1000

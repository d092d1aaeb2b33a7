"""Unit tests for hasten.simulator.latency: the latency model and the prefix cache."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.simulator.config import SimConfig
from hasten.simulator.latency import LatencyPlan, PrefixCache, plan_latency, ttft_ms

words = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"])
prompts = st.lists(words, min_size=0, max_size=120)
ms_values = st.floats(min_value=0, max_value=50, allow_nan=False)


# --- latency model -------------------------------------------------------------------------


def test_ttft_counts_cached_and_uncached_prompt_tokens() -> None:
    config = SimConfig(ttft_base_ms=10, prefill_ms_per_token=2, prefill_cached_ms_per_token=0.5)
    assert ttft_ms(config, 100, 0) == 10 + 200
    assert ttft_ms(config, 100, 64) == 10 + 36 * 2 + 64 * 0.5
    # More cached tokens than prompt tokens cannot make prefill negative.
    assert ttft_ms(config, 10, 50) == 10 + 10 * 0.5


def test_plan_without_jitter_is_exact() -> None:
    config = SimConfig(rtt_ms=3, ttft_base_ms=10, prefill_ms_per_token=1, decode_ms_per_token=2)
    plan = plan_latency(config, random.Random(0), 20, 0)
    assert plan == LatencyPlan(first_token_ms=33, decode_ms_per_token=2, is_straggler=False)
    assert plan.token_due_ms(0) == 33
    assert plan.token_due_ms(4) == 33 + 8
    assert plan.total_ms(5) == 33 + 8
    assert plan.total_ms(0) == 33


def test_straggler_multiplies_first_token_and_decode() -> None:
    config = SimConfig(ttft_base_ms=10, decode_ms_per_token=2, straggler_prob=1, straggler_mult=4)
    plan = plan_latency(config, random.Random(0), 0, 0)
    assert plan.is_straggler
    assert plan.first_token_ms == 40
    assert plan.decode_ms_per_token == 8


def test_overrides_are_exact_even_with_jitter_and_stragglers() -> None:
    config = SimConfig(ttft_base_ms=10, jitter_sigma=1.0, straggler_prob=1)
    plan = plan_latency(
        config, random.Random(0), 5, 0, first_token_override_ms=7, decode_override_ms=3
    )
    assert (plan.first_token_ms, plan.decode_ms_per_token) == (7, 3)


def test_zero_latency_config_plans_zero() -> None:
    plan = plan_latency(SimConfig(), random.Random(0), 1000, 0)
    assert plan.first_token_ms == 0 and plan.decode_ms_per_token == 0


@given(
    seed=st.integers(min_value=0, max_value=2**32),
    sigma=st.floats(min_value=0, max_value=2),
    prob=st.floats(min_value=0, max_value=1),
    sizes=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=20),
)
def test_plans_replay_exactly_for_a_fixed_seed(
    seed: int, sigma: float, prob: float, sizes: list[int]
) -> None:
    config = SimConfig(
        ttft_base_ms=5,
        prefill_ms_per_token=0.1,
        decode_ms_per_token=1,
        jitter_sigma=sigma,
        straggler_prob=prob,
    )
    first_rng, second_rng = random.Random(seed), random.Random(seed)
    first = [plan_latency(config, first_rng, size, 0) for size in sizes]
    second = [plan_latency(config, second_rng, size, 0) for size in sizes]
    assert first == second
    assert all(plan.first_token_ms > 0 and plan.decode_ms_per_token > 0 for plan in first)


@given(
    tokens=prompts,
    block_tokens=st.integers(min_value=1, max_value=32),
    base_ms=ms_values,
    prefill_ms=ms_values,
    cached_share=st.floats(min_value=0, max_value=1),
)
def test_repeated_prompt_never_has_a_slower_ttft_than_cold(
    tokens: list[str], block_tokens: int, base_ms: float, prefill_ms: float, cached_share: float
) -> None:
    config = SimConfig(
        ttft_base_ms=base_ms,
        prefill_ms_per_token=prefill_ms,
        prefill_cached_ms_per_token=prefill_ms * cached_share,
        prefix_block_tokens=block_tokens,
    )
    cache = PrefixCache(block_tokens, capacity_blocks=1000)
    cold_cached = cache.lookup_and_insert("m", tokens)
    warm_cached = cache.lookup_and_insert("m", tokens)
    assert cold_cached == 0
    assert warm_cached == (len(tokens) // block_tokens) * block_tokens
    rng = random.Random(0)
    cold = plan_latency(config, rng, len(tokens), cold_cached)
    warm = plan_latency(config, rng, len(tokens), warm_cached)
    assert warm.first_token_ms <= cold.first_token_ms


# --- prefix cache --------------------------------------------------------------------------


def test_prefix_cache_hits_only_shared_leading_full_blocks() -> None:
    cache = PrefixCache(block_tokens=4, capacity_blocks=100)
    system = [f"s{i}" for i in range(8)]
    assert cache.lookup_and_insert("m", [*system, "q1", "x", "y"]) == 0
    # Same 8-token system prefix, different question: the two full system blocks hit.
    assert cache.lookup_and_insert("m", [*system, "q2", "z"]) == 8
    # A different first block breaks the chain even though later blocks repeat.
    assert cache.lookup_and_insert("m", ["other", *system[1:]]) == 0
    # Another model has its own cache.
    assert cache.lookup_and_insert("other-model", system) == 0


def test_prefix_cache_evicts_least_recently_used_blocks() -> None:
    cache = PrefixCache(block_tokens=2, capacity_blocks=2)
    first, second = ["a", "b"], ["c", "d"]
    cache.lookup_and_insert("m", first)
    cache.lookup_and_insert("m", second)
    assert cache.lookup_and_insert("m", first) == 2  # refreshes `first`
    cache.lookup_and_insert("m", ["e", "f"])  # evicts `second`
    assert len(cache) == 2
    assert cache.lookup_and_insert("m", second) == 0
    cache.resize(0)
    assert len(cache) == 0
    assert cache.lookup_and_insert("m", first) == 0


@given(tokens=prompts, capacity=st.integers(min_value=0, max_value=16))
@settings(max_examples=50)
def test_prefix_cache_never_exceeds_capacity(tokens: list[str], capacity: int) -> None:
    cache = PrefixCache(block_tokens=3, capacity_blocks=capacity)
    for start in range(0, len(tokens), 7):
        cached = cache.lookup_and_insert("m", tokens[start:])
        assert 0 <= cached <= len(tokens) - start
        assert len(cache) <= capacity


# --- Anthropic's breakpoint cache -----------------------------------------------------------


def test_breakpoint_cache_writes_at_breakpoints_and_reads_at_boundaries() -> None:
    from hasten.simulator.latency import BreakpointCache

    cache = BreakpointCache(capacity=100, min_tokens=4)
    tokens = [f"t{i}" for i in range(30)]
    # Blocks end at 10, 20 and 30; the first request marks 20.
    assert cache.lookup_and_write("m", tokens, (10, 20, 30), (20,)) == (0, 20)
    assert cache.lookup_and_write("m", tokens, (10, 20, 30), (20,)) == (20, 0)
    # The conversation grew and the marker moved to 30: the old prefix is read back.
    longer = [*tokens, "t30", "t31"]
    assert cache.lookup_and_write("m", longer, (10, 20, 30, 32), (32,)) == (20, 12)
    assert cache.lookup_and_write("m", longer, (10, 20, 30, 32), (32,)) == (32, 0)
    # No breakpoint: nothing cached; another model: nothing shared.
    assert cache.lookup_and_write("m", tokens, (10, 20, 30), ()) == (0, 0)
    assert cache.lookup_and_write("other", tokens, (10, 20, 30), (20,)) == (0, 20)
    # A changed early block misses everything after it.
    changed = ["x", *tokens[1:]]
    assert cache.lookup_and_write("m", changed, (10, 20, 30), (20,)) == (0, 20)


def test_breakpoint_cache_minimum_and_capacity() -> None:
    from hasten.simulator.latency import BreakpointCache

    cache = BreakpointCache(capacity=100, min_tokens=16)
    tokens = [f"t{i}" for i in range(20)]
    assert cache.lookup_and_write("m", tokens, (8, 20), (8,)) == (0, 0)  # too short
    assert cache.lookup_and_write("m", tokens, (8, 20), (8, 20)) == (0, 20)
    cache.resize(capacity=0, min_tokens=16)
    assert len(cache) == 0
    assert cache.lookup_and_write("m", tokens, (8, 20), (20,)) == (0, 0)
    small = BreakpointCache(capacity=1, min_tokens=1)
    small.lookup_and_write("m", tokens, (10, 20), (10,))
    small.lookup_and_write("m", ["y", *tokens[1:]], (10, 20), (10,))
    assert small.lookup_and_write("m", tokens, (10, 20), (10,)) == (0, 10)  # evicted

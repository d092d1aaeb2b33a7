"""Unit tests of the simulator's pure parts: latency model, prefix cache, faults, text, config."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.errors import ConfigError, InvalidRequest
from hasten.simulator.config import SimConfig, config_from_mapping, load_toml_config
from hasten.simulator.faults import (
    FaultKind,
    decide_fault,
    default_disconnect_after_chunks,
    draw_fault_kind,
)
from hasten.simulator.generation import generate_choices, target_num_tokens
from hasten.simulator.inputs import (
    NO_OVERRIDES,
    parse_chat_request,
    parse_completion_request,
    parse_overrides,
)
from hasten.simulator.latency import LatencyPlan, PrefixCache, plan_latency, ttft_ms
from hasten.simulator.payloads import ChatStreamEncoder
from hasten.simulator.streaming import stream_schedule
from hasten.simulator.textgen import (
    chat_prompt_tokens,
    embedding_vector,
    generate_pieces,
    seed_material,
    truncate_at_stop,
)

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


# --- faults --------------------------------------------------------------------------------


def test_fault_kind_follows_rates() -> None:
    rng = random.Random(0)
    assert draw_fault_kind(SimConfig(error_rate=1), rng) is FaultKind.SERVER_ERROR
    assert draw_fault_kind(SimConfig(rate_limit_rate=1), rng) is FaultKind.RATE_LIMIT
    assert draw_fault_kind(SimConfig(disconnect_rate=1), rng) is FaultKind.DISCONNECT
    kinds = [
        draw_fault_kind(SimConfig(error_rate=0.25, rate_limit_rate=0.25), rng) for _ in range(400)
    ]
    assert {FaultKind.NONE, FaultKind.SERVER_ERROR, FaultKind.RATE_LIMIT} == set(kinds)


def test_zero_rates_do_not_consume_randomness() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert decide_fault(SimConfig(), rng, num_tokens=16).kind is FaultKind.NONE
    assert rng.getstate() == state


def test_forced_faults_win_over_rates() -> None:
    config = SimConfig(error_rate=1, retry_after_s=2)
    rng = random.Random(0)
    assert decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.NONE).kind is (
        FaultKind.NONE
    )
    limited = decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.RATE_LIMIT)
    assert limited.retry_after_s == 2
    limited = decide_fault(
        config, rng, num_tokens=8, forced_kind=FaultKind.RATE_LIMIT, forced_retry_after_s=0.5
    )
    assert limited.retry_after_s == 0.5
    cut = decide_fault(config, rng, num_tokens=8, forced_kind=FaultKind.DISCONNECT)
    assert cut.after_chunks == default_disconnect_after_chunks(8) == 5
    cut = decide_fault(
        config, rng, num_tokens=8, forced_kind=FaultKind.DISCONNECT, forced_after_chunks=0
    )
    assert cut.after_chunks == 0
    assert decide_fault(config, rng, num_tokens=8).after_chunks is None


# --- text, generation, streaming -----------------------------------------------------------


@given(text=st.text(max_size=200), seed=st.integers(min_value=0, max_value=10**9))
@settings(max_examples=50)
def test_generated_text_is_deterministic(text: str, seed: int) -> None:
    material = seed_material("m", text.encode(), seed, 0)
    assert generate_pieces(material, 20) == generate_pieces(material, 20)
    assert len(generate_pieces(material, 200)) == 200


def test_different_prompts_seeds_and_choices_give_different_text() -> None:
    texts = {
        "".join(generate_pieces(seed_material("m", prompt, seed, index), 16))
        for prompt in (b"a", b"b")
        for seed in (None, 1)
        for index in (0, 1)
    }
    assert len(texts) == 8


def test_pieces_join_into_space_separated_words() -> None:
    pieces = generate_pieces(b"x", 5)
    assert not pieces[0].startswith(" ")
    assert all(piece.startswith(" ") for piece in pieces[1:])
    assert len("".join(pieces).split()) == 5


def test_stop_sequence_cuts_text_before_it() -> None:
    pieces = ["one", " two", " three", " four"]
    assert truncate_at_stop(pieces, [" th"]) == (["one", " two"], True)
    assert truncate_at_stop(pieces, ["hre", "wo"]) == (["one", " t"], True)
    assert truncate_at_stop(pieces, ["nope"]) == (pieces, False)
    assert truncate_at_stop(pieces, ["one"]) == ([], True)


def test_target_num_tokens_precedence() -> None:
    assert target_num_tokens(16, None, None) == (16, False)
    assert target_num_tokens(16, 5, None) == (5, True)
    assert target_num_tokens(16, None, 3) == (3, False)
    assert target_num_tokens(16, 5, 3) == (3, False)
    assert target_num_tokens(16, 5, 9) == (5, True)


def test_chat_prompt_tokens_mark_roles_and_read_text_parts() -> None:
    messages: list[object] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi there"}, {"type": "image"}]},
        {"role": "assistant", "content": None},
    ]
    assert chat_prompt_tokens(messages) == [
        "<|system|>",
        "be",
        "brief",
        "<|user|>",
        "hi",
        "there",
        "<|assistant|>",
    ]


def test_generation_honours_n_max_tokens_and_stop() -> None:
    request = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 4}
    )
    choices = generate_choices(request, 16, None)
    assert len(choices) == 3
    assert all(len(c.pieces) == 4 and c.finish_reason == "length" for c in choices)
    first_word = choices[0].pieces[1].strip()
    stopped = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": [first_word]}
    )
    assert generate_choices(stopped, 16, None)[0].finish_reason == "stop"


def test_stream_schedule_orders_role_tokens_finish_usage() -> None:
    request = parse_completion_request({"model": "m", "prompt": "hi", "n": 2, "max_tokens": 3})
    choices = generate_choices(request, 16, None)
    encoder = ChatStreamEncoder("id", 0, "m", include_usage=True, num_choices=2)
    plan = LatencyPlan(first_token_ms=10, decode_ms_per_token=2)
    events = list(stream_schedule(encoder, choices, plan, {"prompt_tokens": 1}))
    assert [b'"role"' in data for _, data, _ in events[:2]] == [True, True]
    assert sum(num_tokens for _, _, num_tokens in events) == 6
    due = [due_ms for due_ms, _, _ in events]
    assert due == sorted(due) and due[0] == 10 and due[-1] == 14
    assert b'"finish_reason":"length"' in events[-2][1] and b'"choices":[]' in events[-1][1]


def test_embeddings_are_unit_length_and_deterministic() -> None:
    vector = embedding_vector("m", "hello", 64)
    assert len(vector) == 64
    assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-9)
    assert vector == embedding_vector("m", "hello", 64)
    assert vector != embedding_vector("m", "hello!", 64)
    assert len(embedding_vector("m", "hello", 300)) == 300


# --- request headers and config ------------------------------------------------------------


def test_override_headers_parse_and_reject_bad_values() -> None:
    assert parse_overrides([(b"authorization", b"x")]) is NO_OVERRIDES
    overrides = parse_overrides(
        [
            (b"x-sim-ttft-ms", b"12.5"),
            (b"x-sim-decode-ms", b"1"),
            (b"x-sim-fail", b"Disconnect"),
            (b"x-sim-fail-after-chunks", b"3"),
            (b"x-sim-retry-after", b"0.25"),
            (b"x-sim-tokens", b"7"),
        ]
    )
    assert overrides.first_token_ms == 12.5 and overrides.decode_ms == 1
    assert overrides.fail is FaultKind.DISCONNECT and overrides.fail_after_chunks == 3
    assert overrides.retry_after_s == 0.25 and overrides.num_tokens == 7
    for header in [
        (b"x-sim-fail", b"503"),
        (b"x-sim-tokens", b"-1"),
        (b"x-sim-ttft-ms", b"nan"),
        (b"x-sim-typo", b"1"),
    ]:
        with pytest.raises(InvalidRequest):
            parse_overrides([header])


def test_config_updates_are_validated() -> None:
    config = config_from_mapping({"decode_ms_per_token": 2, "models": "a, b"})
    assert config.decode_ms_per_token == 2.0 and config.models == ("a", "b")
    bad_changes: list[dict[str, object]] = [
        {"no_such_field": 1},
        {"error_rate": 1.5},
        {"error_rate": 0.6, "rate_limit_rate": 0.6},
        {"rtt_ms": -1},
        {"rtt_ms": "fast"},
        {"seed": 1.5},
        {"strict_models": 1},
        {"output_tokens": True},
        {"prefill_cached_ms_per_token": 1},  # cached prefill may not cost more than uncached
        {"models": []},
    ]
    for changes in bad_changes:
        with pytest.raises(ConfigError):
            config.updated(changes)


def test_toml_config_reads_the_simulator_table(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text('[simulator]\nttft_base_ms = 50\nmodels = ["x"]\n\n[gateway]\nport = 1\n')
    config = load_toml_config(path)
    assert config.ttft_base_ms == 50.0 and config.models == ("x",)
    path.write_text("[simulator]\nttft_base_ms = -5\n")
    with pytest.raises(ConfigError):
        load_toml_config(path)
    with pytest.raises(ConfigError):
        load_toml_config(tmp_path / "missing.toml")

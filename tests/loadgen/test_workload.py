"""The deterministic prompt sequence and request bodies of hasten bench."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.loadgen.payload import encode_body, endpoint_url
from hasten.loadgen.workload import (
    DEFAULT_ZIPF_NUM_UNIQUE,
    Prompt,
    WorkloadSpec,
    load_prompts,
    parse_prompts,
    prompt_indices,
    synthetic_text,
)


def first(spec: WorkloadSpec, count: int) -> list[int]:
    return list(itertools.islice(prompt_indices(spec), count))


def test_default_synthetic_workload_never_repeats() -> None:
    assert first(WorkloadSpec(), 50) == list(range(50))


def test_num_unique_cycles_round_robin() -> None:
    assert first(WorkloadSpec(num_unique=3), 7) == [0, 1, 2, 0, 1, 2, 0]


@given(
    seed=st.integers(0, 2**32),
    repeat_ratio=st.floats(0.0, 1.0),
    num_unique=st.none() | st.integers(1, 40),
)
def test_repeat_sequence_introduces_prompts_in_order(
    seed: int, repeat_ratio: float, num_unique: int | None
) -> None:
    spec = WorkloadSpec(seed=seed, repeat_ratio=repeat_ratio, num_unique=num_unique)
    indices = first(spec, 200)
    assert indices == first(spec, 200)  # deterministic
    num_seen = 0
    for index in indices:
        assert index <= num_seen  # either an earlier prompt or exactly the next new one
        num_seen = max(num_seen, index + 1)
    if num_unique is not None:
        assert num_seen <= num_unique


def test_repeat_ratio_is_honoured_on_average() -> None:
    indices = first(WorkloadSpec(seed=7, repeat_ratio=0.3), 20_000)
    num_new = len(set(indices))
    num_repeats = len(indices) - num_new
    assert abs(num_repeats / len(indices) - 0.3) < 0.02


def test_repeat_ratio_extremes() -> None:
    assert first(WorkloadSpec(repeat_ratio=0.0), 5) == [0, 1, 2, 3, 4]
    assert first(WorkloadSpec(repeat_ratio=1.0), 5) == [0, 0, 0, 0, 0]


def test_exhausted_population_forces_repeats() -> None:
    indices = first(WorkloadSpec(repeat_ratio=0.0, num_unique=3), 10)
    assert indices[:3] == [0, 1, 2]
    assert all(index < 3 for index in indices)


@given(seed=st.integers(0, 1000), exponent=st.floats(0.1, 3.0), num_unique=st.integers(1, 50))
def test_zipf_stays_in_population(seed: int, exponent: float, num_unique: int) -> None:
    spec = WorkloadSpec(seed=seed, zipf_s=exponent, num_unique=num_unique)
    assert all(0 <= index < num_unique for index in first(spec, 300))


def test_zipf_favours_low_ranks_and_defaults_its_population() -> None:
    counts = Counter(first(WorkloadSpec(seed=1, zipf_s=1.2, num_unique=100), 10_000))
    assert counts.most_common(1)[0][0] == 0
    assert counts[0] > counts[1] > counts[9]
    assert WorkloadSpec(zipf_s=1.0).population() == DEFAULT_ZIPF_NUM_UNIQUE


def test_synthetic_prompts_depend_on_seed_and_index_only() -> None:
    assert synthetic_text(1, 2, 8) == synthetic_text(1, 2, 8)
    assert synthetic_text(1, 2, 8) != synthetic_text(2, 2, 8)
    assert synthetic_text(1, 2, 8) != synthetic_text(1, 3, 8)
    spec = WorkloadSpec(seed=5, prompt_num_words=4)
    assert spec.prompt_at(0) == Prompt.from_text(synthetic_text(5, 0, 4))


def test_parse_prompts_accepts_jsonl_and_text() -> None:
    text = "\n".join(
        [
            '{"prompt": "hello"}',
            "",
            '{"messages": [{"role": "system", "content": "be brief"},'
            ' {"role": "user", "content": "hi"}]}',
            "plain line",
            "{not json at all",
        ]
    )
    prompts = parse_prompts(text)
    assert [prompt.as_text() for prompt in prompts] == [
        "hello",
        "be brief\nhi",
        "plain line",
        "{not json at all",
    ]
    assert prompts[1].messages[0] == {"role": "system", "content": "be brief"}


def test_parse_prompts_rejects_json_without_prompt() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_prompts('{"prompt": "ok"}\n{"input": "nope"}')


def test_prompts_file_bounds_population(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_text("a\nb\nc\n", encoding="utf-8")
    prompts = load_prompts(path)
    assert WorkloadSpec(prompts=prompts).population() == 3
    assert WorkloadSpec(prompts=prompts, num_unique=2).population() == 2
    assert first(WorkloadSpec(prompts=prompts, num_unique=2), 4) == [0, 1, 0, 1]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prompts": ()},
        {"num_unique": 0},
        {"repeat_ratio": 1.5},
        {"zipf_s": 0.0},
        {"repeat_ratio": 0.5, "zipf_s": 1.0},
        {"prompt_num_words": 0},
    ],
)
def test_invalid_specs_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WorkloadSpec(**kwargs)  # type: ignore[arg-type,unused-ignore]


def test_chat_body() -> None:
    body = orjson.loads(
        encode_body(
            Prompt.from_text("hi"),
            endpoint="chat",
            model="m",
            stream=True,
            temperature=0.0,
            max_tokens=16,
            extra_body={"seed": 3},
        )
    )
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 3,
    }


def test_completions_body_leaves_unset_parameters_to_the_server() -> None:
    body = orjson.loads(
        encode_body(
            Prompt.from_text("hi"),
            endpoint="completions",
            model="m",
            stream=False,
            temperature=None,
            max_tokens=None,
        )
    )
    assert body == {"model": "m", "prompt": "hi", "stream": False}
    assert endpoint_url("http://h/v1/", "completions") == "http://h/v1/completions"
    assert endpoint_url("http://h/v1", "chat") == "http://h/v1/chat/completions"

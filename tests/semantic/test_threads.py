"""The embedder's thread-count tuner (pure): driven by scripted batch costs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.semantic.threads import ThreadTuner


def _run(tuner: ThreadTuner, num_tokens: int, cost_s: dict[int, float], steps: int) -> list[int]:
    chosen = []
    for _ in range(steps):
        count = tuner.choose(num_tokens)
        tuner.record(num_tokens, count, cost_s[count] * num_tokens)
        chosen.append(count)
    return chosen


def test_a_fixed_count_when_probing_is_off() -> None:
    tuner = ThreadTuner(max_threads=3, probe_every=0)
    assert _run(tuner, 8, {3: 0.01}, 20) == [3] * 20
    assert tuner.best_counts() == {}


def test_it_moves_to_the_faster_count_and_rarely_probes_the_slower() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every=4, max_probe_every=64)
    chosen = _run(tuner, 8, {1: 0.006, 2: 0.003}, 200)
    assert chosen[0] == 1 and chosen[-1] == 2
    assert chosen[20:].count(1) <= 4  # backed off: a 2x loser is tried ever more rarely
    assert tuner.best_counts() == {"8+": 2}


def test_it_follows_a_change_of_load() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every=4, max_probe_every=16)
    _run(tuner, 8, {1: 0.006, 2: 0.003}, 50)
    chosen = _run(tuner, 8, {1: 0.006, 2: 0.100}, 20)  # another process takes a core
    assert chosen[2:].count(1) >= 16


def test_a_collapsed_count_backs_off() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every=4, max_probe_every=256)
    _run(tuner, 16, {1: 0.006, 2: 0.004}, 50)
    chosen = _run(tuner, 16, {1: 0.006, 2: 0.040}, 400)  # two threads now 10x slower
    assert chosen[-1] == 1
    assert chosen.count(2) <= 12  # at most a few dozen of 400 batches pay the 10x price


def test_buckets_are_independent_and_a_new_one_starts_from_its_neighbour() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every=4)
    _run(tuner, 2, {1: 0.006, 2: 0.012}, 50)
    _run(tuner, 32, {1: 0.006, 2: 0.003}, 50)
    assert tuner.best_counts() == {"2+": 1, "32+": 2}
    assert tuner.choose(20) == 2  # 16-31 starts where 32+ settled


@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(1, 5000), st.floats(1e-4, 1.0)), min_size=1, max_size=60),
)
@settings(max_examples=100, deadline=None)
def test_it_only_ever_chooses_a_count_it_may(
    max_threads: int, batches: list[tuple[int, float]]
) -> None:
    tuner = ThreadTuner(max_threads=max_threads, probe_every=2)
    for num_tokens, cost_s in batches:
        count = tuner.choose(num_tokens)
        assert 1 <= count <= max_threads
        tuner.record(num_tokens, count, cost_s)

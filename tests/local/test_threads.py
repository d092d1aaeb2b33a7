"""Unit tests for hasten.local.threads: the step-mode tuner (pure)."""

from __future__ import annotations

from hasten.local.threads import StepMode, ThreadTuner

ONE, TWO, SPLIT = StepMode(1), StepMode(2), StepMode(1, is_split=True)


def _run(
    tuner: ThreadTuner,
    num_tokens: int,
    cost_s: dict[StepMode, float],
    steps: int,
    is_splittable: bool = False,
) -> list[StepMode]:
    chosen = []
    for _ in range(steps):
        mode = tuner.choose(num_tokens, is_splittable)
        tuner.record(num_tokens, is_splittable, mode, cost_s[mode] * num_tokens)
        chosen.append(mode)
    return chosen


def test_fixed_counts_when_probing_is_off() -> None:
    tuner = ThreadTuner(max_threads=2, single_token_threads=1, probe_every_steps=0)
    assert tuner.choose(1) == ONE and tuner.choose(8, True) == TWO


def test_tuner_moves_to_the_faster_count_and_rarely_probes_the_slower() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4, max_probe_every_steps=64)
    chosen = _run(tuner, 8, {ONE: 0.006, TWO: 0.003}, 200)
    assert chosen[0] == ONE and chosen[-1] == TWO
    assert chosen[20:].count(ONE) <= 4  # backed off: a 2x loser is tried ever more rarely
    assert tuner.best_modes() == {"8+": "2 threads"}


def test_tuner_follows_a_change_of_load() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4, max_probe_every_steps=16)
    _run(tuner, 8, {ONE: 0.006, TWO: 0.003}, 50)
    chosen = _run(tuner, 8, {ONE: 0.006, TWO: 0.100}, 20)  # another process takes a core
    assert chosen[2:].count(ONE) >= 16


def test_splitting_is_tried_only_for_steps_of_single_tokens() -> None:
    costs = {ONE: 0.008, TWO: 0.010, SPLIT: 0.006}
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4)
    assert _run(tuner, 2, costs, 40, is_splittable=True)[-20:].count(SPLIT) >= 14
    assert SPLIT not in _run(tuner, 2, costs, 40, is_splittable=False)


def test_lone_tokens_are_tuned_and_buckets_are_independent() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4)
    chosen = _run(tuner, 1, {ONE: 0.006, TWO: 0.004}, 50)
    assert chosen[0] == ONE and chosen[-20:].count(TWO) >= 18  # one stream, idle cores
    _run(tuner, 2, {ONE: 0.006, TWO: 0.012}, 50)
    _run(tuner, 8, {ONE: 0.006, TWO: 0.003}, 50)
    assert tuner.best_modes() == {"1+": "2 threads", "2+": "1 threads", "8+": "2 threads"}


def test_lone_tokens_fall_back_to_one_thread_when_a_core_is_taken() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4, max_probe_every_steps=256)
    _run(tuner, 1, {ONE: 0.006, TWO: 0.004}, 50)
    # Another process takes a core: two threads collapse 10x at every barrier.
    chosen = _run(tuner, 1, {ONE: 0.006, TWO: 0.040}, 400)
    assert chosen[-1] == ONE
    # Collapsed probes back off: at most a few dozen of 400 steps pay the 10x price.
    assert chosen.count(TWO) <= 12


def test_a_new_bucket_starts_from_its_neighbours_choice() -> None:
    tuner = ThreadTuner(max_threads=2, probe_every_steps=4)
    _run(tuner, 8, {ONE: 0.006, TWO: 0.003}, 50)
    assert tuner.choose(5) == TWO

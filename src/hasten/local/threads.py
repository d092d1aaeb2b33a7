"""Picks how many CPU threads each decode step uses, from measured step times.

Pure (no llama.cpp, no clock): the engine reports what each step cost, and asks before
the next one. Why measure rather than configure: on a small model every ggml graph has
hundreds of barriers, so extra threads pay off only while each has a core to itself. On
2 cores, measured in-process, 8 single-token sequences ran at 290-300 tok/s with 2 threads
on an otherwise idle core but at 12-210 tok/s when another process held it, where 1
thread kept 160-180 tok/s. Which is faster changes with the machine's other load, so the
tuner keeps the best known count per step size and re-tries the others now and then,
backing off while they keep losing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A step's cost per token depends on its size (fixed overheads amortise), so step sizes
# are compared only within a power-of-two bucket: 1, 2-3, 4-7, 8-15, 16-31, 32+ tokens.
_MAX_BUCKET = 6
_EMA_WEIGHT = 0.3


@dataclass(slots=True)
class _Arm:
    num_threads: int
    s_per_token: float | None = None


@dataclass(slots=True)
class _Bucket:
    arms: list[_Arm]
    best: _Arm
    probe_interval_steps: int
    steps_until_probe: int
    probing: _Arm | None = None
    next_probe_index: int = 0


@dataclass(slots=True)
class ThreadTuner:
    """``probe_every_steps`` 0: fixed counts (``single_token_threads`` for lone tokens,
    ``max_threads`` for the rest). Otherwise lone tokens keep ``single_token_threads`` and
    a bigger step tries another count after that many steps of its bucket, the interval
    doubling up to ``max_probe_every_steps`` while the tried count loses, and starting
    again from ``probe_every_steps`` once one wins.
    """

    max_threads: int
    single_token_threads: int = 1
    probe_every_steps: int = 8
    max_probe_every_steps: int = 512
    _buckets: dict[int, _Bucket] = field(default_factory=dict, repr=False)

    def choose(self, num_tokens: int) -> int:
        if self.probe_every_steps == 0:
            return self.single_token_threads if num_tokens == 1 else self.max_threads
        bucket = self._bucket(num_tokens)
        bucket.steps_until_probe -= 1
        others = [arm for arm in bucket.arms if arm is not bucket.best]
        if bucket.steps_until_probe > 0 or not others:
            bucket.probing = None
            return bucket.best.num_threads
        bucket.probing = others[bucket.next_probe_index % len(others)]
        bucket.next_probe_index += 1
        return bucket.probing.num_threads

    def record(self, num_tokens: int, num_threads: int, elapsed_s: float) -> None:
        """What the step just chosen for ``num_tokens`` cost with ``num_threads``."""
        if self.probe_every_steps == 0 or num_tokens < 1:
            return
        bucket = self._bucket(num_tokens)
        sample = elapsed_s / num_tokens
        probe, bucket.probing = bucket.probing, None
        if probe is not None and probe.num_threads == num_threads:
            # A probe is judged on its own fresh sample: the machine's load may have changed
            # since this count last ran, which is the reason for probing at all.
            probe.s_per_token = sample
            best = bucket.best.s_per_token
            if best is None or sample < best:
                bucket.best = probe
                bucket.probe_interval_steps = self.probe_every_steps
            else:
                bucket.probe_interval_steps = min(
                    2 * bucket.probe_interval_steps, self.max_probe_every_steps
                )
            bucket.steps_until_probe = bucket.probe_interval_steps
            return
        arm = bucket.best
        if arm.num_threads != num_threads:
            return
        if arm.s_per_token is None:
            arm.s_per_token = sample
        else:
            arm.s_per_token += _EMA_WEIGHT * (sample - arm.s_per_token)
        # The best count got slower than another one last measured (load arrived): try the
        # other now rather than after a backed-off interval of collapsed steps.
        if any(
            other.s_per_token is not None and other.s_per_token < arm.s_per_token
            for other in bucket.arms
        ):
            bucket.probe_interval_steps = self.probe_every_steps
            bucket.steps_until_probe = min(bucket.steps_until_probe, 1)

    def best_threads(self) -> dict[int, int]:
        """Current choice per bucket (1: lone tokens, 2: 2-3 tokens, ...), for stats."""
        return {key: bucket.best.num_threads for key, bucket in sorted(self._buckets.items())}

    def _bucket(self, num_tokens: int) -> _Bucket:
        key = min(max(num_tokens, 1).bit_length(), _MAX_BUCKET)
        bucket = self._buckets.get(key)
        if bucket is None:
            # Lone tokens are not tuned: more threads never beat one on a lone token of a
            # small model (170 vs 164 tok/s idle), and each losing probe costs a collapsed step.
            counts = (
                [self.single_token_threads] if key == 1 else _candidate_counts(self.max_threads)
            )
            start = self.single_token_threads if key == 1 else 1
            arms = [_Arm(count) for count in counts]
            best = next((arm for arm in arms if arm.num_threads == start), arms[0])
            # The first probe comes early: nothing is known about the other counts yet.
            bucket = _Bucket(arms, best, self.probe_every_steps, 2)
            self._buckets[key] = bucket
        return bucket


def _candidate_counts(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, and ``max_threads`` itself."""
    counts = {max_threads}
    count = 1
    while count < max_threads:
        counts.add(count)
        count *= 2
    return sorted(counts)

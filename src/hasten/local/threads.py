"""Decides how each decode step runs on the CPU (threads, one batch or one token at a time),
from measured step times.

Pure (no llama.cpp, no clock): the engine reports what each step cost, and asks before
the next one. Why measure rather than configure: on a small model every ggml graph has
hundreds of barriers, so extra threads pay off only while each has a core to itself. On
2 cores, measured in-process, 8 single-token sequences ran at 290-300 tok/s with 2 threads
on an otherwise idle core but at 12-210 tok/s when another process held it, where 1
thread kept 160-180 tok/s. And on one thread a batch of single tokens costs more than
the same tokens decoded one by one (2 tokens: 16 vs 12 ms; the quantised matmuls gain
nothing from a second column and the output layer takes a slower path), until about 8.
Which mode is fastest changes with the machine's other load, so the tuner keeps the best
known mode per kind of step and re-tries the others now and then, backing off while they
keep losing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A step's cost per token depends on its size (fixed overheads amortise), so steps are
# compared only within a power-of-two bucket (1, 2-3, 4-7, 8-15, 16-31, 32+ tokens), and
# steps of single tokens only (which can be split) apart from steps with a prefill chunk.
_MAX_SIZE_CLASS = 6
_EMA_WEIGHT = 0.3
# A losing mode waits at least this many times its cost ratio to the best before its next
# try, so losing probes take at most ~1/20 of the time however badly a mode collapses.
_PROBE_COST_FACTOR = 20
# A mode that lost by less than this is tried again at the base interval (costs at most
# half a step's time per try); beyond it, the backoff above.
_NEAR_TIE_RATIO = 1.5


@dataclass(frozen=True, slots=True)
class StepMode:
    """``num_threads`` per ``llama_decode``; ``is_split``: one decode per sequence."""

    num_threads: int
    is_split: bool = False


@dataclass(slots=True)
class _Arm:
    mode: StepMode
    probe_interval_steps: int
    steps_until_probe: int
    s_per_token: float | None = None


@dataclass(slots=True)
class _Bucket:
    arms: list[_Arm]
    best: _Arm
    probing: _Arm | None = None


@dataclass(slots=True)
class ThreadTuner:
    """``probe_every_steps`` 0: fixed (``single_token_threads`` for lone tokens,
    ``max_threads`` for batches). Otherwise every kind of step (lone tokens start on
    ``single_token_threads``) tries another mode after that many steps of its bucket; a mode that
    lost clearly waits longer each time (doubling, and at least its cost ratio × 20, up to
    ``max_probe_every_steps``), one that lost narrowly or won starts again from
    ``probe_every_steps``.
    """

    max_threads: int
    single_token_threads: int = 1
    probe_every_steps: int = 8
    max_probe_every_steps: int = 2048
    _buckets: dict[tuple[int, bool], _Bucket] = field(default_factory=dict, repr=False)

    def choose(self, num_tokens: int, is_splittable: bool = False) -> StepMode:
        """``is_splittable``: the step holds several sequences of one token each."""
        if self.probe_every_steps == 0:
            return self._fixed_mode(num_tokens)
        bucket = self._bucket(num_tokens, is_splittable)
        bucket.probing = None
        for arm in bucket.arms:
            if arm is not bucket.best:
                arm.steps_until_probe -= 1
                if arm.steps_until_probe <= 0 and bucket.probing is None:
                    bucket.probing = arm
        return (bucket.probing or bucket.best).mode

    def _fixed_mode(self, num_tokens: int) -> StepMode:
        return StepMode(self.single_token_threads if num_tokens == 1 else self.max_threads)

    def record(
        self, num_tokens: int, is_splittable: bool, mode: StepMode, elapsed_s: float
    ) -> None:
        """What the step just chosen for these arguments cost in ``mode``."""
        if self.probe_every_steps == 0 or num_tokens < 1:
            return
        bucket = self._bucket(num_tokens, is_splittable)
        sample = elapsed_s / num_tokens
        probe, bucket.probing = bucket.probing, None
        if probe is not None and probe.mode == mode:
            self._judge_probe(bucket, probe, sample)
            return
        arm = bucket.best
        if arm.mode != mode:
            return
        if arm.s_per_token is None:
            arm.s_per_token = sample
        else:
            arm.s_per_token += _EMA_WEIGHT * (sample - arm.s_per_token)
        # The best mode got slower than another one last measured (load arrived): try the
        # other now rather than after a backed-off interval of collapsed steps.
        for other in bucket.arms:
            if other.s_per_token is not None and other.s_per_token < arm.s_per_token:
                other.probe_interval_steps = self.probe_every_steps
                other.steps_until_probe = min(other.steps_until_probe, 1)

    def best_modes(self) -> dict[str, str]:
        """Current choice per bucket, e.g. ``{"8+ split": "2 threads"}``, for stats.

        Safe from another thread: the bucket table is copied in one C-level call.
        """
        buckets = list(self._buckets.items())
        return {
            f"{1 << (size - 1)}+{' split' if split else ''}": (
                f"{bucket.best.mode.num_threads} threads"
                + (", split" if bucket.best.mode.is_split else "")
            )
            for (size, split), bucket in sorted(buckets, key=lambda item: item[0])
        }

    def _judge_probe(self, bucket: _Bucket, probe: _Arm, sample: float) -> None:
        # A probe is judged on its own fresh sample: the machine's load may have changed
        # since this mode last ran, which is the reason for probing at all.
        probe.s_per_token = sample
        best = bucket.best
        if best.s_per_token is None or sample < best.s_per_token:
            best.probe_interval_steps = best.steps_until_probe = self.probe_every_steps
            bucket.best = probe
            return
        cost_ratio = sample / max(best.s_per_token, 1e-9)
        if cost_ratio < _NEAR_TIE_RATIO:
            # Close call, cheap to repeat: one sample on a shared machine decides little.
            probe.probe_interval_steps = self.probe_every_steps
        else:
            probe.probe_interval_steps = min(
                max(2 * probe.probe_interval_steps, int(_PROBE_COST_FACTOR * cost_ratio)),
                self.max_probe_every_steps,
            )
        probe.steps_until_probe = probe.probe_interval_steps

    def _bucket(self, num_tokens: int, is_splittable: bool) -> _Bucket:
        size = min(max(num_tokens, 1).bit_length(), _MAX_SIZE_CLASS)
        key = (size, is_splittable and num_tokens > 1)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._new_bucket(*key)
            self._buckets[key] = bucket
        return bucket

    def _new_bucket(self, size: int, is_splittable: bool) -> _Bucket:
        # Lone tokens are tuned too: a single stream is where a second thread matters most
        # on an idle machine (2 threads decoded one stream 1.6x faster than 1 here, as
        # llama.cpp's own server does by default), and where a collapsed probe on a busy
        # one is cheapest to back off from.
        modes = [StepMode(count) for count in _candidate_counts(self.max_threads)]
        if is_splittable:
            modes.append(StepMode(self.single_token_threads, is_split=True))
        # The first tries come early and one at a time: nothing is known about them yet.
        arms = [_Arm(mode, self.probe_every_steps, 2 + index) for index, mode in enumerate(modes)]
        # Starts where the nearest bucket of the same kind settled (same machine, same
        # load), else on the lone-token count (one thread by default: safe on a busy
        # machine; the faster count is found within a few steps).
        start = self._nearest_best(size, is_splittable) or StepMode(self.single_token_threads)
        best = next((arm for arm in arms if arm.mode == start), arms[0])
        return _Bucket(arms, best)

    def _nearest_best(self, size: int, is_splittable: bool) -> StepMode | None:
        neighbours = [
            (abs(other_size - size), bucket.best.mode)
            for (other_size, other_split), bucket in self._buckets.items()
            if other_split == is_splittable and other_size > 1
        ]
        return min(neighbours, key=lambda item: item[0])[1] if neighbours else None


def _candidate_counts(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, and ``max_threads`` itself."""
    counts = {max_threads}
    count = 1
    while count < max_threads:
        counts.add(count)
        count *= 2
    return sorted(counts)

"""How many threads the embedder runs a batch on, learnt from measured batch times.

Pure (no model, no clock): the embedder asks before a batch and reports what it cost. Why
measure rather than configure: on two cores a 118-character question took 13 ms on 2
threads and 25 ms on 1 while the second core was idle, but 88 ms on 2 and 30 ms on 1 while
another process held it (docs/benchmarks.md, "Threads, measured per batch"). So the tuner
keeps the fastest known count per batch size and re-tries the others now and then, backing
off while they keep losing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A batch's cost per token depends on its size (fixed overheads amortise), so batches are
# compared only within a power-of-two bucket of tokens (1, 2-3, 4-7, ..., 32+).
_MAX_SIZE_CLASS = 6
_EMA_WEIGHT = 0.3
# A losing count waits at least this many times its cost ratio to the best before its next
# try, so losing probes take at most ~1/20 of the time however badly a count collapses.
_PROBE_COST_FACTOR = 20
# A count that lost by less than this is tried again at the base interval; beyond it, the
# backoff above.
_NEAR_TIE_RATIO = 1.5


@dataclass(slots=True)
class _Arm:
    num_threads: int
    probe_interval: int
    until_probe: int
    s_per_token: float | None = None


@dataclass(slots=True)
class _Bucket:
    arms: list[_Arm]
    best: _Arm
    probing: _Arm | None = None


@dataclass(slots=True)
class ThreadTuner:
    """``probe_every`` 0: always ``max_threads``. Otherwise each bucket tries another count
    after that many batches; a count that lost clearly waits longer each time (doubling,
    and at least its cost ratio x 20, up to ``max_probe_every``), one that lost narrowly or
    won starts again from ``probe_every``."""

    max_threads: int
    probe_every: int = 8
    max_probe_every: int = 64
    _buckets: dict[int, _Bucket] = field(default_factory=dict, repr=False)

    def choose(self, num_tokens: int) -> int:
        """The thread count for the next batch of ``num_tokens``."""
        if self.probe_every == 0:
            return self.max_threads
        bucket = self._bucket(num_tokens)
        bucket.probing = None
        for arm in bucket.arms:
            if arm is not bucket.best:
                arm.until_probe -= 1
                if arm.until_probe <= 0 and bucket.probing is None:
                    bucket.probing = arm
        return (bucket.probing or bucket.best).num_threads

    def record(self, num_tokens: int, num_threads: int, elapsed_s: float) -> None:
        """What the batch just chosen for ``num_tokens`` cost on ``num_threads``."""
        if self.probe_every == 0 or num_tokens < 1:
            return
        bucket = self._bucket(num_tokens)
        sample = elapsed_s / num_tokens
        probe, bucket.probing = bucket.probing, None
        if probe is not None and probe.num_threads == num_threads:
            self._judge_probe(bucket, probe, sample)
            return
        arm = bucket.best
        if arm.num_threads != num_threads:
            return
        if arm.s_per_token is None:
            arm.s_per_token = sample
        else:
            arm.s_per_token += _EMA_WEIGHT * (sample - arm.s_per_token)
        # The best count got slower than another last measured (load arrived): try the
        # other now rather than after a backed-off interval of slow batches.
        for other in bucket.arms:
            if other.s_per_token is not None and other.s_per_token < arm.s_per_token:
                other.probe_interval = self.probe_every
                other.until_probe = min(other.until_probe, 1)

    def best_counts(self) -> dict[str, int]:
        """The current choice per bucket, e.g. ``{"8+": 2}``, for stats (safe from another
        thread: the bucket table is copied in one C-level call)."""
        buckets = sorted(self._buckets.items())
        return {f"{1 << (size - 1)}+": bucket.best.num_threads for size, bucket in buckets}

    def _judge_probe(self, bucket: _Bucket, probe: _Arm, sample: float) -> None:
        # A probe is judged on its own fresh sample: the machine's load may have changed
        # since this count last ran, which is the reason for probing at all.
        probe.s_per_token = sample
        best = bucket.best
        if best.s_per_token is None or sample < best.s_per_token:
            best.probe_interval = best.until_probe = self.probe_every
            bucket.best = probe
            return
        cost_ratio = sample / max(best.s_per_token, 1e-9)
        if cost_ratio < _NEAR_TIE_RATIO:  # a close call, cheap to repeat
            probe.probe_interval = self.probe_every
        else:
            probe.probe_interval = min(
                max(2 * probe.probe_interval, int(_PROBE_COST_FACTOR * cost_ratio)),
                self.max_probe_every,
            )
        probe.until_probe = probe.probe_interval

    def _bucket(self, num_tokens: int) -> _Bucket:
        size = min(max(num_tokens, 1).bit_length(), _MAX_SIZE_CLASS)
        bucket = self._buckets.get(size)
        if bucket is None:
            counts = _candidate_counts(self.max_threads)
            # The first tries come early and one at a time: nothing is known about them yet.
            arms = [_Arm(count, self.probe_every, 2 + i) for i, count in enumerate(counts)]
            # Starts where the nearest bucket settled (same machine, same load), else on one
            # thread: safe on a busy machine, and the faster count is found within a few
            # batches.
            start = min(self._buckets.items(), key=lambda item: abs(item[0] - size), default=None)
            count = 1 if start is None else start[1].best.num_threads
            bucket = _Bucket(arms, next(arm for arm in arms if arm.num_threads == count))
            self._buckets[size] = bucket
        return bucket


def _candidate_counts(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, and ``max_threads`` itself."""
    counts = {max_threads}
    count = 1
    while count < max_threads:
        counts.add(count)
        count *= 2
    return sorted(counts)

"""Time saved: the upstream latency an answer avoided by not being fetched from upstream.

The estimate comes from the router's live per-deployment estimates (``routing/estimates.py``)
and is defined precisely here, because ``hasten_latency_saved_seconds_total`` and the
``x-hasten-saved-ms`` header are only as honest as this rule:

- **expected upstream latency** of a model for ``n`` output tokens: among the model's
  deployments whose breaker admits traffic (all of them, if none does), those of the best
  priority tier; of those, the lowest ``TTFT estimate + time-per-output-token estimate x n``.
  That is the deployment the router ranks first when it has no load and no affinity to
  follow; a deployment without a TTFT estimate yet is left out, and without any there is no
  estimate. ``n`` is the answer's ``completion_tokens`` (0 when its usage is unknown, so
  only the TTFT counts: an underestimate).
- **cache hit** (exact or semantic): expected upstream latency minus what the client waited
  for the whole answer (time to the response start, plus the replay pacing of a stream),
  floored at 0.
- **coalesced waiter**: expected upstream latency minus the waiter's own end-to-end time,
  floored at 0 (it waited for the tail of a call someone else started).
- **winning hedge**: the primary was abandoned ``e`` ms into its attempt (when the hedge
  won). Its TTFT ``T`` is then known to exceed ``e``; the saving is the expected residual
  ``E[T - e | T > e]`` over the primary's recent TTFT window (the samples above ``e``).
  Samples that are themselves lower bounds (abandoned stragglers) make this conservative.
  With no sample above ``e`` there is no estimate.

No estimate means no header and nothing counted: a saving is never made up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from hasten.routing.pool import DeploymentPool
    from hasten.values.outcome import RequestOutcome


class DeploymentEstimate(NamedTuple):
    """What the router believes about one deployment right now (a tuple: one is built per
    deployment on every cache hit)."""

    ttft_s: float | None
    tpot_s: float | None
    priority: int
    is_available: bool


def expected_upstream_s(estimates: Sequence[DeploymentEstimate], num_tokens: int) -> float | None:
    """The first-ranked deployment's expected latency for ``num_tokens`` output tokens."""
    # One pass: the usable tier is the least (unavailable, priority) among the measured.
    num_tokens = max(0, num_tokens)
    best_rank: tuple[bool, int] | None = None
    best_s = 0.0
    for e in estimates:
        if e.ttft_s is None:
            continue
        rank = (not e.is_available, e.priority)
        latency_s = e.ttft_s + (e.tpot_s or 0.0) * num_tokens
        if best_rank is None or rank < best_rank:
            best_rank, best_s = rank, latency_s
        elif rank == best_rank and latency_s < best_s:
            best_s = latency_s
    return None if best_rank is None else best_s


def saved_s(expected_s: float | None, waited_s: float) -> float | None:
    """What was avoided: the expected upstream latency less the wait, never below 0."""
    return None if expected_s is None else max(0.0, expected_s - waited_s)


def hedge_residual_s(samples_ms: Iterable[float], elapsed_ms: float) -> float | None:
    """``E[T - e | T > e]`` over the primary's recent TTFT samples, in seconds."""
    above = [s - elapsed_ms for s in samples_ms if s > elapsed_ms]
    return sum(above) / len(above) / 1000.0 if above else None


def pool_estimates(pool: DeploymentPool, now_s: float) -> list[DeploymentEstimate]:
    """The pool's deployments as ``DeploymentEstimate``; reads only, decides nothing."""
    result = []
    for d in pool.deployments.values():
        estimate = d.estimate
        ttft_ms = estimate.ttft_ms(now_s)
        tpot_ms = estimate.tpot_ms
        result.append(
            DeploymentEstimate(
                None if ttft_ms is None else ttft_ms / 1000.0,
                None if tpot_ms is None else tpot_ms / 1000.0,
                d.config.priority,
                d.breaker.is_available(now_s),
            )
        )
    return result


# A pool's estimates are read again after this long even when it learnt nothing: they fade
# with time (seconds), and an open breaker half-opens on a clock.
ESTIMATES_REUSE_S = 0.01


class SavedTime:
    """The rule above applied to the live pools of an ``UpstreamClient`` (``pools_of``).

    Every cache hit asks this before its answer goes out, so a pool's estimates are read once
    and reused until the pool learns something (its ``version``) or ``ESTIMATES_REUSE_S``
    passes: reading them costs more than the rest of a hit's own bookkeeping.
    """

    def __init__(self, pools_of: PoolSource) -> None:
        self._pools_of = pools_of
        # Route name -> (pool, its version, when read, what was read).
        self._read: dict[str, tuple[DeploymentPool, int, float, list[DeploymentEstimate]]] = {}

    def answer_s(self, model: str, num_tokens: int, waited_s: float, now_s: float) -> float | None:
        """A cache hit's saving (``model`` is the route name, as the pools are keyed)."""
        pool = self._pools_of.existing_pool(model)
        if pool is None:
            return None
        return saved_s(
            expected_upstream_s(self._estimates(model, pool, now_s), num_tokens), waited_s
        )

    def _estimates(
        self, model: str, pool: DeploymentPool, now_s: float
    ) -> list[DeploymentEstimate]:
        read = self._read.get(model)
        if read is not None:
            read_pool, version, read_s, estimates = read
            if (
                read_pool is pool
                and version == pool.version
                and 0 <= now_s - read_s < ESTIMATES_REUSE_S
            ):
                return estimates
        estimates = pool_estimates(pool, now_s)
        self._read[model] = (pool, pool.version, now_s, estimates)
        return estimates

    def coalesced_s(self, model: str, outcome: RequestOutcome) -> float | None:
        return self.answer_s(model, outcome.tokens_out or 0, outcome.e2e_s, time.monotonic())

    def hedge_s(self, model: str, primary: str, elapsed_ms: float) -> float | None:
        pool = self._pools_of.existing_pool(model)
        deployment = None if pool is None else pool.deployments.get(primary)
        if deployment is None:
            return None
        return hedge_residual_s(deployment.estimate.recent_samples(), elapsed_ms)


class PoolSource(Protocol):
    def existing_pool(self, name: str) -> DeploymentPool | None: ...

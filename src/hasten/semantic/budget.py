"""Error-budget mode: the operator names the tolerated false-hit rate; thresholds are learned.

The idea follows vCache ("verified semantic prompt caching", ICLR 2026), implemented here
from its description: every cached entry collects observations (similarity of a later
question, whether the cached answer turned out right). A logistic model of
P(correct | similarity) is fitted per entry, starting from a model pooled over all entries,
and its Laplace-approximated uncertainty gives an upper confidence bound on the chance that
serving the entry is wrong. The cache serves only when that bound is within the budget;
otherwise it answers from upstream and, within a bounded verification budget, compares the
fresh answer with the cached one to learn. Even confident hits are verified now and then,
with a probability that shrinks as an entry collects evidence.

Pure arithmetic plus an instance-owned random generator (seeded, so runs are reproducible).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EXPLOIT = "exploit"  # serve the cached answer
EXPLORE = "explore"  # answer from upstream, then verify the cached answer against it
MISS = "miss"  # answer from upstream, nothing to learn

_NEWTON_STEPS = 12


@dataclass(frozen=True, slots=True)
class Observation:
    similarity: float
    is_correct: bool


@dataclass(frozen=True, slots=True)
class BudgetPolicy:
    """``max_error_rate``: tolerated share of lookups answered wrongly (the budget, delta).

    ``center_similarity`` / ``scale_similarity`` put the embedder's useful cosine range on a
    unit scale (the static threshold and roughly its band); ``prior_*`` say where the
    boundary is believed to be before any evidence and how loosely.
    """

    max_error_rate: float = 0.01
    confidence_z: float = 1.645
    center_similarity: float = 0.95
    scale_similarity: float = 0.03
    prior_intercept: float = 0.0
    prior_slope: float = 2.0
    prior_variance: float = 4.0
    entry_variance: float = 0.25
    max_explore_rate: float = 0.2
    # No single hit may be riskier than this, however much budget is left.
    max_hit_error_rate: float = 0.1
    max_verify_fraction: float = 0.25
    verify_burst: int = 20
    min_correct_upper: float = 0.02
    max_observations_per_entry: int = 32
    max_pooled_observations: int = 8192
    refit_every: int = 32


@dataclass(frozen=True, slots=True)
class Gaussian:
    """A 2-D Gaussian over (intercept, slope) of the logit."""

    mean: npt.NDArray[np.float64]
    cov: npt.NDArray[np.float64]


def fit_logistic(
    xs: npt.NDArray[np.float64], ys: npt.NDArray[np.float64], prior: Gaussian
) -> Gaussian:
    """MAP logistic regression with a Gaussian prior and its Laplace approximation."""
    precision0 = np.linalg.inv(prior.cov)
    weights = prior.mean.copy()
    design = np.column_stack([np.ones_like(xs), xs])
    hessian = precision0
    for _ in range(_NEWTON_STEPS):
        probabilities = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (probabilities - ys) + precision0 @ (weights - prior.mean)
        curvature = probabilities * (1.0 - probabilities)
        hessian = design.T @ (design * curvature[:, None]) + precision0
        step = np.linalg.solve(hessian, gradient)
        weights = weights - step
        if float(np.abs(step).max()) < 1e-6:
            break
    return Gaussian(weights, np.linalg.inv(hessian))


class ErrorBudget:
    """Decides exploit / explore / miss for a candidate and learns from verifications."""

    def __init__(self, policy: BudgetPolicy, *, seed: int = 0) -> None:
        self.policy = policy
        self._random = random.Random(seed)
        self._prior = Gaussian(
            np.array([policy.prior_intercept, policy.prior_slope]),
            np.eye(2) * policy.prior_variance,
        )
        self._pooled: list[Observation] = []
        self._num_since_fit = 0
        self._pooled_model = self._prior
        self.num_decisions = 0
        self.num_exploited = 0
        self.num_explored = 0
        self.num_verify_skipped = 0
        self.num_observed = 0
        self.num_lookups = 0
        # Sum of the upper bounds on P(wrong) of every served hit: errors we may have made.
        self.expected_errors = 0.0

    @property
    def pooled_observations(self) -> list[Observation]:
        return list(self._pooled)

    def restore(self, observations: Sequence[Observation]) -> None:
        """Reloads pooled evidence saved by an earlier run."""
        self._pooled = list(observations)[-self.policy.max_pooled_observations :]
        self._refit()

    def observe(self, similarity: float, is_correct: bool) -> None:
        """A verified outcome; the caller also appends it to the entry's own observations."""
        self.num_observed += 1
        self._pooled.append(Observation(similarity, is_correct))
        if len(self._pooled) > self.policy.max_pooled_observations:
            # Forget a random old observation so the pool tracks drift yet stays unbiased.
            index = self._random.randrange(len(self._pooled) - 1)
            self._pooled[index] = self._pooled[-1]
            self._pooled.pop()
        self._num_since_fit += 1
        if self._num_since_fit >= self.policy.refit_every:
            self._refit()

    def decide(self, similarity: float, entry_observations: Sequence[Observation]) -> str:
        """EXPLOIT, EXPLORE or MISS for a candidate at ``similarity``."""
        self.num_decisions += 1
        correct_low, correct_high = self.correct_bounds(similarity, entry_observations)
        wrong_high = 1.0 - correct_low
        if wrong_high <= self.policy.max_error_rate:
            explore_p = self.policy.max_explore_rate / (1.0 + len(entry_observations))
            if self._random.random() >= explore_p or not self._may_verify():
                return self._exploit(wrong_high)
            self.num_explored += 1
            return EXPLORE
        if wrong_high <= self.policy.max_hit_error_rate and self._is_affordable(wrong_high):
            # Lookups without a usable candidate are never wrong: their share of the budget
            # pays for hits that are individually a little riskier than the budget.
            return self._exploit(wrong_high)
        if correct_high < self.policy.min_correct_upper:
            return MISS  # hopeless: even optimistically this entry is wrong here
        if not self._may_verify():
            self.num_verify_skipped += 1
            return MISS
        self.num_explored += 1
        return EXPLORE

    def correct_bounds(
        self, similarity: float, entry_observations: Sequence[Observation]
    ) -> tuple[float, float]:
        """Lower and upper confidence bounds on P(the cached answer is right | similarity)."""
        model = self.entry_model(entry_observations)
        x = np.array([1.0, self._scale(similarity)])
        mean = float(x @ model.mean)
        spread = self.policy.confidence_z * math.sqrt(max(float(x @ model.cov @ x), 0.0))
        return _sigmoid(mean - spread), _sigmoid(mean + spread)

    def entry_model(self, entry_observations: Sequence[Observation]) -> Gaussian:
        """The pooled model, bent by the entry's own evidence (entries differ in difficulty)."""
        if not entry_observations:
            return self._pooled_model
        recent = entry_observations[-self.policy.max_observations_per_entry :]
        prior = Gaussian(
            self._pooled_model.mean,
            self._pooled_model.cov + np.eye(2) * self.policy.entry_variance,
        )
        xs = np.array([self._scale(item.similarity) for item in recent])
        ys = np.array([1.0 if item.is_correct else 0.0 for item in recent])
        return fit_logistic(xs, ys, prior)

    def stats(self) -> dict[str, float]:
        return {
            "decisions": self.num_decisions,
            "exploited": self.num_exploited,
            "explored": self.num_explored,
            "verify_skipped": self.num_verify_skipped,
            "observations": self.num_observed,
            "lookups": self.num_lookups,
            "expected_error_rate": self.expected_errors / max(1, self.num_lookups),
            "verify_fraction": self.num_explored / max(1, self.num_decisions),
        }

    def note_lookup(self) -> None:
        """Counts every lookup (with or without a candidate): the budget is per lookup."""
        self.num_lookups += 1

    def _is_affordable(self, wrong_high: float) -> bool:
        allowed = self.policy.max_error_rate * max(self.num_lookups, self.num_decisions)
        return self.expected_errors + wrong_high <= allowed

    def _exploit(self, wrong_high: float) -> str:
        self.num_exploited += 1
        self.expected_errors += wrong_high
        return EXPLOIT

    def _may_verify(self) -> bool:
        allowed = self.policy.max_verify_fraction * self.num_decisions + self.policy.verify_burst
        return self.num_explored < allowed

    def _scale(self, similarity: float) -> float:
        return (similarity - self.policy.center_similarity) / self.policy.scale_similarity

    def _refit(self) -> None:
        self._num_since_fit = 0
        if not self._pooled:
            self._pooled_model = self._prior
            return
        xs = np.array([self._scale(item.similarity) for item in self._pooled])
        ys = np.array([1.0 if item.is_correct else 0.0 for item in self._pooled])
        self._pooled_model = fit_logistic(xs, ys, self._prior)


def _sigmoid(logit: float) -> float:
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    exp_logit = math.exp(logit)
    return exp_logit / (1.0 + exp_logit)

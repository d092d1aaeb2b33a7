"""The best one or two hedges can do on the routing benchmark's tail workload (a Monte Carlo).

TTFT is log-normal (median 300 ms, sigma 0.2) with probability 0.97 and 10x that with
probability 0.03, drawn afresh for every attempt. A policy hedges at d1 (from the request
start) when the primary has no token, and a second time at d2 when neither the primary nor
the first hedge has one; the answer is the first token of any attempt. Its cost is the share
of extra upstream requests: P(T1 > d1) + P(min(T1, d1 + T2) > d2). A perfect, overhead-free
hedger: no budget window, no cold start, no estimation error; so these are bounds.

Printed: the ratios no hedging / hedging at p99 and p99.9 over all requests, and, since the
benchmark measures p99.9 over 2000 requests (the third-slowest), the share of 2000-request
runs whose p99.9 is at least 4x lower than the no-hedge p99.9.

    .venv/bin/python bench/routing/hedge_bound.py [--requests 400000] [--seed 15]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MEDIAN_MS = 300.0
SIGMA = 0.2
STRAGGLER_PROB = 0.03
STRAGGLER_MULT = 10.0
BUDGET = 0.05
RUN_REQUESTS = 2000  # one benchmark run: its p99.9 is its third-slowest request
GOAL_P999_RATIO = 4.0
DEFAULT_QUANTILE = 0.96  # the pool's first-hedge quantile at a 5% budget (BUDGET_FILL 0.8)
GAP_QUANTILES = (0.5, 0.8, 0.9, 0.96)  # candidate second-hedge gaps, as pooled quantiles

Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Outcome:
    d1_ms: float
    d2_ms: float
    cost: float  # extra upstream requests per request
    p99_ms: float
    p999_ms: float
    p9999_ms: float
    run_goal_share: float  # share of 2000-request runs with p99.9 >= 4x lower than no hedging


def draw(rng: np.random.Generator, num: int) -> Array:
    body = MEDIAN_MS * np.exp(SIGMA * rng.standard_normal(num))
    return np.where(rng.random(num) < STRAGGLER_PROB, body * STRAGGLER_MULT, body)


def mixture_quantile_ms(quantile: float) -> float:
    """The exact TTFT quantile of the mixture (bisection on its survival function)."""
    low, high = 1.0, MEDIAN_MS * STRAGGLER_MULT * 10.0
    for _ in range(100):
        mid = (low + high) / 2.0
        z_body = math.log(mid / MEDIAN_MS) / SIGMA
        z_slow = math.log(mid / (MEDIAN_MS * STRAGGLER_MULT)) / SIGMA
        survival = (1 - STRAGGLER_PROB) * _tail(z_body) + STRAGGLER_PROB * _tail(z_slow)
        low, high = (mid, high) if survival > 1.0 - quantile else (low, mid)
    return (low + high) / 2.0


def _tail(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


class Model:
    def __init__(self, num_requests: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.t1, self.t2, self.t3 = (draw(rng, num_requests) for _ in range(3))
        plain = np.quantile(self.t1, [0.99, 0.999])
        self.plain_p99_ms, self.plain_p999_ms = float(plain[0]), float(plain[1])

    def run(self, d1_ms: float, d2_ms: float = math.inf) -> Outcome:
        first = self.t1 > d1_ms
        after_one = np.where(first, np.minimum(self.t1, d1_ms + self.t2), self.t1)
        second = after_one > d2_ms
        ttft = np.where(second, np.minimum(after_one, d2_ms + self.t3), after_one)
        p99, p999, p9999 = (float(q) for q in np.quantile(ttft, [0.99, 0.999, 0.9999]))
        num_runs = len(ttft) // RUN_REQUESTS
        runs = ttft[: num_runs * RUN_REQUESTS].reshape(num_runs, RUN_REQUESTS)
        run_p999 = np.quantile(runs, 0.999, axis=1)
        share = float(np.mean(self.plain_p999_ms / run_p999 >= GOAL_P999_RATIO))
        cost = float(first.mean() + second.mean())
        return Outcome(d1_ms, d2_ms, cost, p99, p999, p9999, share)

    def best_two(self, min_p99_ratio: float, *, is_for_runs: bool) -> Outcome:
        """Within the budget and p99 >= min_p99_ratio, the two-hedge policy with the best
        p99.9 over all requests, or (``is_for_runs``) the one whose 2000-request runs most
        often reach the p99.9 goal (then the best p99.9)."""
        best: tuple[tuple[float, float], Outcome] | None = None
        for d1 in np.arange(445.0, 531.0, 5.0):
            for d2 in np.arange(d1 + 200.0, d1 + 600.0, 10.0):
                outcome = self.run(float(d1), float(d2))
                if outcome.cost > BUDGET or self.plain_p99_ms / outcome.p99_ms < min_p99_ratio:
                    continue
                share = -outcome.run_goal_share if is_for_runs else 0.0
                key = (share, outcome.p999_ms)
                if best is None or key < best[0]:
                    best = (key, outcome)
        if best is None:
            raise RuntimeError("no two-hedge policy fits the budget")
        return best[1]

    def line(self, label: str, o: Outcome) -> str:
        d2 = "-" if math.isinf(o.d2_ms) else f"{o.d2_ms:.0f}"
        return (
            f"{label:<34} d1 {o.d1_ms:4.0f} d2 {d2:>4} ms  extra {100 * o.cost:4.2f}%  "
            f"p99 {o.p99_ms:5.0f} ({self.plain_p99_ms / o.p99_ms:.2f}x)  "
            f"p99.9 {o.p999_ms:5.0f} ({self.plain_p999_ms / o.p999_ms:.2f}x)  "
            f"p99.99 {o.p9999_ms:5.0f}  runs >= 4x at p99.9: {100 * o.run_goal_share:.0f}%"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400_000)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    model = Model(args.requests, args.seed)
    print(f"no hedging: p99 {model.plain_p99_ms:.0f} ms, p99.9 {model.plain_p999_ms:.0f} ms")
    p95, p96 = mixture_quantile_ms(1.0 - BUDGET), mixture_quantile_ms(DEFAULT_QUANTILE)
    one = model.run(p95)
    print(model.line("one hedge at p95 (the bound)", one))
    print(model.line("one hedge at p96 (the default)", model.run(p96)))
    for quantile in GAP_QUANTILES:
        gap_ms = mixture_quantile_ms(quantile)
        label = f"two: p96, then p{100 * quantile:g} later"
        print(model.line(label, model.run(p96, p96 + gap_ms)))
    min_ratio = 0.95 * model.plain_p99_ms / one.p99_ms
    label = f"best two for p99.9 (p99 >= {min_ratio:.2f}x)"
    print(model.line(label, model.best_two(min_ratio, is_for_runs=False)))
    label = f"best two for runs (p99 >= {min_ratio:.2f}x)"
    print(model.line(label, model.best_two(min_ratio, is_for_runs=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

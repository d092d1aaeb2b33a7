"""The routing benchmark's tail test in virtual time: the real ``DeploymentPool`` (ranking,
hedge delays, budget, second-hedge target, censored observations) driven by a discrete-event
model of the race ``Dispatch`` runs. No sockets and no sleeps, so many seeds take seconds.

Eight clients in a closed loop send 2000 streamed requests to three deployments (TTFT
log-normal around 300 ms, sigma 0.2, 3% stragglers at 10x, fresh per attempt; 20 tokens at
10 ms, 10x for a straggler); half-way through, deployment ``c`` degrades to 1500 ms. A hedge
the budget refuses is asked for again ``hedge_retry_s`` later, as ``Dispatch`` does. Each
seed runs once without hedging and once with it; printed per configuration: the median over
seeds of p99 and p99.9 TTFT and of the ratios no hedging / hedging, the share of seeds that
reach the goals (p99 >= 3.97x, p99.9 >= 4x, extra upstream requests <= 5%), and hedges by
level. What it leaves out: the gateway's and the network's overhead, and retries.

    .venv/bin/python bench/routing/hedge_virtual.py [--seeds 30] [--requests 2000]
        [--second-quantiles first,0.8] [--budget-bursts 0,20]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import random
import statistics
from dataclasses import dataclass, field

from hasten.config.routing import DeploymentConfig, HedgeConfig, RoutingConfig
from hasten.loadgen.stats import percentile
from hasten.routing.pool import DeploymentPool

NAMES = ("a", "b", "c")
NUM_CLIENTS = 8
TTFT_MS = 300.0
SIGMA = 0.2
STRAGGLER_PROB = 0.03
STRAGGLER_MULT = 10.0
DECODE_MS = 200.0  # 20 tokens at 10 ms
DEGRADED_TTFT_MS = 1500.0
GOAL_P99_RATIO = 3.97
GOAL_P999_RATIO = 4.0
GOAL_EXTRA_PCT = 5.0
BENCH_HEDGE = HedgeConfig(is_enabled=True, max_delay_ms=1000.0)  # as bench/support/routing_setup.py


@dataclass
class _Attempt:
    name: str
    started_s: float
    level: int
    is_straggler: bool
    is_probe: bool
    is_live: bool = True


@dataclass
class _Request:
    started_s: float
    order: tuple[str, ...]
    attempts: list[_Attempt] = field(default_factory=list)
    num_chances: int = 0
    hedge_started_s: float | None = None
    retry_s: float = 0.0  # a hedge the budget refused is asked for again from then
    is_done: bool = False


@dataclass(order=True)
class _Event:
    at_s: float
    seq: int
    kind: str = field(compare=False)  # token, hedge, end
    request: _Request = field(compare=False)
    attempt: _Attempt | None = field(compare=False, default=None)


@dataclass
class Result:
    ttft_ms: list[float] = field(default_factory=list)
    num_attempts: int = 0
    hedges_by_level: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0})


class Simulation:
    def __init__(self, routing: RoutingConfig, num_requests: int, seed: int) -> None:
        deployments = [DeploymentConfig(upstream=n) for n in NAMES]
        self.pool = DeploymentPool(deployments, routing, random.Random(seed))
        self.rng = random.Random(seed * 7919 + 1)
        self.num_requests = num_requests
        self.events: list[_Event] = []
        self.seq = 0
        self.num_sent = 0
        self.result = Result()

    def push(self, at_s: float, kind: str, request: _Request, attempt: _Attempt | None) -> None:
        self.seq += 1
        heapq.heappush(self.events, _Event(at_s, self.seq, kind, request, attempt))

    def run(self) -> Result:
        for _ in range(NUM_CLIENTS):
            self.send(0.0)
        while self.events:
            event = heapq.heappop(self.events)
            now_s, request = event.at_s, event.request
            if event.kind == "end":
                self.pool.on_attempt_end(event.attempt.name if event.attempt else "")
                self.send(now_s)
            elif request.is_done:
                continue
            elif event.kind == "token" and event.attempt is not None and event.attempt.is_live:
                self.win(request, event.attempt, now_s)
            elif event.kind == "hedge":
                self.maybe_hedge(request, now_s)
        return self.result

    def send(self, now_s: float) -> None:
        if self.num_sent >= self.num_requests:
            return
        self.num_sent += 1
        self.pool.on_request(now_s)
        order = self.pool.rank(now_s).order
        request = _Request(now_s, order)
        self.start(request, order[0], 0, now_s)

    def start(self, request: _Request, name: str, level: int, now_s: float) -> None:
        is_probe = self.pool.on_attempt_start(name, now_s)
        is_straggler = self.rng.random() < STRAGGLER_PROB
        base_ms = TTFT_MS
        if name == "c" and self.num_sent > self.num_requests // 2:
            base_ms = DEGRADED_TTFT_MS
        ttft_ms = base_ms * self.rng.lognormvariate(0.0, SIGMA)
        ttft_ms *= STRAGGLER_MULT if is_straggler else 1.0
        attempt = _Attempt(name, now_s, level, is_straggler, is_probe)
        request.attempts.append(attempt)
        self.result.num_attempts += 1
        self.push(now_s + ttft_ms / 1000.0, "token", request, attempt)
        self.schedule_hedge(request, now_s)

    def hedge_due_s(self, request: _Request, now_s: float) -> float | None:
        """``Dispatch._hedge_at_s``, on this model's state."""
        live = [a for a in request.attempts if a.is_live]
        hedge = self.pool.routing.hedge
        if not hedge.is_enabled or not live or request.num_chances >= hedge.max_hedges:
            return None
        if request.num_chances == 0:
            if len(live) != 1:
                return None
            due_s = live[0].started_s + self.pool.hedge_delay_s(live[0].name, now_s)
            return max(due_s, request.retry_s)
        if request.hedge_started_s is None:
            return None
        return max(request.hedge_started_s + self.pool.second_hedge_gap_s(), request.retry_s)

    def schedule_hedge(self, request: _Request, now_s: float) -> None:
        due_s = self.hedge_due_s(request, now_s)
        if due_s is not None:
            self.push(max(now_s, due_s), "hedge", request, None)

    def maybe_hedge(self, request: _Request, now_s: float) -> None:
        due_s = self.hedge_due_s(request, now_s)
        if due_s is None:
            return
        if now_s < due_s:  # the delay moved since it was scheduled
            self.push(due_s, "hedge", request, None)
            return
        level = request.num_chances + 1
        tries = {name: sum(a.name == name for a in request.attempts) for name in NAMES}
        target = self.pool.hedge_target(request.order, tries, now_s, level=level)
        if target is None:
            request.num_chances = level
            self.schedule_hedge(request, now_s)
        elif self.pool.try_hedge(now_s, level=level):
            request.num_chances = level
            request.retry_s = 0.0
            self.result.hedges_by_level[level] += 1
            if level == 1:
                request.hedge_started_s = now_s
            self.start(request, target, level, now_s)
        else:  # refused by the budget: with a bucket, asked again later, as Dispatch does
            retry_s = self.pool.hedge_retry_s()
            if retry_s is None:
                request.num_chances = level
            else:
                request.retry_s = now_s + retry_s
            self.schedule_hedge(request, now_s)

    def win(self, request: _Request, winner: _Attempt, now_s: float) -> None:
        request.is_done = True
        ttft_ms = (now_s - winner.started_s) * 1000.0
        self.pool.on_first_token(
            winner.name, ttft_ms, now_s, is_probe=winner.is_probe, started_s=winner.started_s
        )
        for attempt in request.attempts:
            if attempt is winner or not attempt.is_live:
                continue
            attempt.is_live = False
            elapsed_ms = (now_s - attempt.started_s) * 1000.0
            self.pool.on_cancelled(
                attempt.name,
                elapsed_ms,
                now_s,
                is_probe=attempt.is_probe,
                started_s=attempt.started_s,
            )
            self.pool.on_attempt_end(attempt.name)
        self.result.ttft_ms.append((now_s - request.started_s) * 1000.0)
        decode_s = DECODE_MS / 1000.0 * (STRAGGLER_MULT if winner.is_straggler else 1.0)
        self.push(now_s + decode_s, "end", request, winner)


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return percentile(ordered, 0.99), percentile(ordered, 0.999)


@dataclass(frozen=True, slots=True)
class Row:
    """One seed: the hedged run against the same seed without hedging."""

    p99_ms: float
    p999_ms: float
    p99_ratio: float
    p999_ratio: float
    extra_pct: float
    hedges_by_level: dict[int, int]
    max_ms: float  # the slowest request's TTFT: where the tail ends

    @property
    def is_goal(self) -> bool:
        return (
            self.p99_ratio >= GOAL_P99_RATIO
            and self.p999_ratio >= GOAL_P999_RATIO
            and self.extra_pct <= GOAL_EXTRA_PCT
        )


def one_seed(hedge: HedgeConfig, num_requests: int, seed: int) -> Row:
    off = RoutingConfig(hedge=dataclasses.replace(hedge, is_enabled=False))
    plain = Simulation(off, num_requests, seed).run()
    hedged = Simulation(RoutingConfig(hedge=hedge), num_requests, seed).run()
    plain_p99, plain_p999 = quantiles(plain.ttft_ms)
    p99, p999 = quantiles(hedged.ttft_ms)
    extra_pct = 100.0 * (hedged.num_attempts - num_requests) / num_requests  # 100 of 2000: 5.0
    return Row(
        p99,
        p999,
        plain_p99 / p99,
        plain_p999 / p999,
        extra_pct,
        hedged.hedges_by_level,
        max(hedged.ttft_ms),
    )


def evaluate(label: str, hedge: HedgeConfig, num_seeds: int, num_requests: int) -> None:
    rows = [one_seed(hedge, num_requests, seed) for seed in range(1, num_seeds + 1)]

    def median(values: list[float]) -> float:
        return statistics.median(values)

    num_p99 = sum(r.p99_ratio >= GOAL_P99_RATIO for r in rows)
    num_p999 = sum(r.p999_ratio >= GOAL_P999_RATIO for r in rows)
    print(
        f"{label:<26} p99 {median([r.p99_ms for r in rows]):4.0f} ms"
        f" ({median([r.p99_ratio for r in rows]):.2f}x)"
        f"  p99.9 {median([r.p999_ms for r in rows]):5.0f} ms"
        f" ({median([r.p999_ratio for r in rows]):.2f}x)"
        f"  extra {median([r.extra_pct for r in rows]):.2f}%"
        f" (max {max(r.extra_pct for r in rows):.2f}%)"
        f"  slowest {median([r.max_ms for r in rows]):5.0f} ms"
        f" (max {max(r.max_ms for r in rows):5.0f})"
        f"  hedges {median([r.hedges_by_level[1] for r in rows]):.0f}"
        f" + {median([r.hedges_by_level[2] for r in rows]):.0f}"
        f"  seeds at goal: p99 {num_p99}/{len(rows)}, p99.9 {num_p999}/{len(rows)},"
        f" all {sum(r.is_goal for r in rows)}/{len(rows)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument(
        "--second-quantiles", default="first,0.8", help="'first': the first hedge's quantile"
    )
    parser.add_argument("--budget-bursts", default="0,20", help="0: the sliding window")
    args = parser.parse_args()
    for burst in (float(text) for text in args.budget_bursts.split(",")):
        base = dataclasses.replace(BENCH_HEDGE, budget_burst=burst)
        name = f"burst {burst:g}" if burst else "window"
        one = dataclasses.replace(base, max_hedges=1)
        evaluate(f"{name}, one hedge", one, args.seeds, args.requests)
        for text in args.second_quantiles.split(","):
            quantile = None if text == "first" else float(text)
            gap = "the first's" if quantile is None else f"p{100 * quantile:g}"
            hedge = dataclasses.replace(base, max_hedges=2, second_quantile=quantile)
            evaluate(f"{name}, two, gap {gap}", hedge, args.seeds, args.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Two hedges in virtual time: the pool alone, driven by a small discrete-event model of the
race ``Dispatch`` runs (hedge when late, again when the hedge is late too, first token wins,
losers cancelled, a hedge the budget refused asked for again). Eight clients in a closed loop
against three deployments (log-normal TTFT around 300 ms, 3% stragglers at 10x, fresh per
attempt); half-way through, ``c`` degrades to 5x. No sockets and no sleeps, so the outcome
does not depend on the machine's load.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from hasten.config.routing import DeploymentConfig, HedgeConfig, RoutingConfig
from hasten.routing.exploration import fastest_typical_ms, is_avoided
from hasten.routing.pool import DeploymentPool

NAMES = ("a", "b", "c")
NUM_CLIENTS = 8
NUM_REQUESTS = 1500
DECODE_S = 0.2
BURST = 20.0
SEEDS = range(1, 7)


@dataclass
class _Attempt:
    name: str
    started_s: float
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


@dataclass
class _Outcome:
    ttft_s: list[float] = field(default_factory=list)
    num_second: int = 0
    avoided_targets: int = 0  # hedges sent to an avoided deployment while a healthy one was free


class _Race:
    def __init__(self, max_hedges: int, seed: int) -> None:
        hedge = HedgeConfig(
            is_enabled=True, max_delay_ms=1000.0, max_hedges=max_hedges, budget_burst=BURST
        )
        deployments = [DeploymentConfig(upstream=n) for n in NAMES]
        self.pool = DeploymentPool(deployments, RoutingConfig(hedge=hedge), random.Random(seed))
        self.rng = random.Random(seed + 1000)
        self.events: list[tuple[float, int, str, _Request, _Attempt | None]] = []
        self.num_events = 0
        self.num_sent = 0
        self.outcome = _Outcome()

    def push(self, at_s: float, kind: str, request: _Request, attempt: _Attempt | None) -> None:
        self.num_events += 1
        heapq.heappush(self.events, (at_s, self.num_events, kind, request, attempt))

    def run(self) -> _Race:
        for _ in range(NUM_CLIENTS):
            self.send(0.0)
        while self.events:
            now_s, _, kind, request, attempt = heapq.heappop(self.events)
            if kind == "end":
                self.send(now_s)
            elif not request.is_done and kind == "token" and attempt and attempt.is_live:
                self.win(request, attempt, now_s)
            elif not request.is_done and kind == "hedge":
                self.maybe_hedge(request, now_s)
        return self

    def send(self, now_s: float) -> None:
        if self.num_sent >= NUM_REQUESTS:
            return
        self.num_sent += 1
        self.pool.on_request(now_s)
        request = _Request(now_s, self.pool.rank(now_s).order)
        self.start(request, request.order[0], now_s)

    def start(self, request: _Request, name: str, now_s: float) -> None:
        self.pool.on_attempt_start(name, now_s)
        slowdown = 5.0 if name == "c" and self.num_sent > NUM_REQUESTS // 2 else 1.0
        ttft_s = 0.3 * slowdown * self.rng.lognormvariate(0.0, 0.2)
        ttft_s *= 10.0 if self.rng.random() < 0.03 else 1.0
        attempt = _Attempt(name, now_s)
        request.attempts.append(attempt)
        self.push(now_s + ttft_s, "token", request, attempt)
        due_s = self.due_s(request, now_s)
        if due_s is not None:
            self.push(due_s, "hedge", request, None)

    def due_s(self, request: _Request, now_s: float) -> float | None:
        live = [a for a in request.attempts if a.is_live]
        if request.num_chances >= self.pool.routing.hedge.max_hedges:
            return None
        if request.num_chances == 0:
            due_s = live[0].started_s + self.pool.hedge_delay_s(live[0].name, now_s)
            return max(due_s, request.retry_s)
        if request.hedge_started_s is None:
            return None
        return max(request.hedge_started_s + self.pool.second_hedge_gap_s(), request.retry_s)

    def maybe_hedge(self, request: _Request, now_s: float) -> None:
        due_s = self.due_s(request, now_s)
        if due_s is None:
            return
        if now_s < due_s:
            self.push(due_s, "hedge", request, None)
            return
        level = request.num_chances + 1
        tries = {n: sum(a.name == n for a in request.attempts) for n in NAMES}
        target = self.pool.hedge_target(request.order, tries, now_s, level=level)
        if target is None:
            request.num_chances = level
            return
        if not self.pool.try_hedge(now_s, level=level):  # asked again later, as Dispatch does
            retry_s = self.pool.hedge_retry_s()
            assert retry_s is not None  # a token bucket
            request.retry_s = now_s + retry_s
            self.push(request.retry_s, "hedge", request, None)
            return
        request.num_chances = level
        fastest_ms = fastest_typical_ms(d.estimate for d in self.pool.deployments.values())
        avoided = {
            n for n, d in self.pool.deployments.items() if is_avoided(d.estimate, fastest_ms)
        }
        free = [n for n in NAMES if n not in avoided and (level == 2 or tries[n] == 0)]
        self.outcome.avoided_targets += target in avoided and bool(free)
        self.outcome.num_second += level == 2
        if level == 1:
            request.hedge_started_s = now_s
        self.start(request, target, now_s)

    def win(self, request: _Request, winner: _Attempt, now_s: float) -> None:
        request.is_done = True
        ttft_ms = (now_s - winner.started_s) * 1000.0
        self.pool.on_first_token(
            winner.name, ttft_ms, now_s, is_probe=False, started_s=winner.started_s
        )
        for attempt in request.attempts:
            if attempt is not winner and attempt.is_live:
                attempt.is_live = False
                elapsed_ms = (now_s - attempt.started_s) * 1000.0
                self.pool.on_cancelled(
                    attempt.name, elapsed_ms, now_s, is_probe=False, started_s=attempt.started_s
                )
                self.pool.on_attempt_end(attempt.name)
        self.outcome.ttft_s.append(now_s - request.started_s)
        self.pool.on_attempt_end(winner.name)
        self.push(now_s + DECODE_S, "end", request, None)


def test_two_hedges_keep_answers_clear_of_stragglers_within_the_hard_budget() -> None:
    one = [_Race(1, seed).run() for seed in SEEDS]
    two = [_Race(2, seed).run() for seed in SEEDS]
    for race in one + two:
        assert len(race.outcome.ttft_s) == NUM_REQUESTS
        # Both levels count against one budget: the bucket's burst counts inside the 5%.
        assert race.pool.num_hedges <= max(BURST, 0.05 * NUM_REQUESTS)
        # A hedge the budget refused was asked for again: no straggler on the degraded c
        # (15 s) is left to run its course.
        assert max(race.outcome.ttft_s) < 5.0
    for race in two:
        # Neither level went to the degraded c while a healthy deployment could take it.
        assert race.outcome.avoided_targets == 0
    assert sum(race.pool.num_second_hedges for race in two) > 0

    # Without a second hedge more requests wait for a straggler (2.5 s and more) when their
    # hedge straggles too. Not none with it: the hard cap refuses some hedges.
    def num_late(races: list[_Race]) -> int:
        return sum(t > 2.5 for race in races for t in race.outcome.ttft_s)

    assert num_late(two) < num_late(one)

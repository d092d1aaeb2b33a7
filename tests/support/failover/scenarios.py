"""The failover catalogue: every scenario, its pass rule and how it runs, in one list.

``tests/test_failover.py`` runs each once (``Run.num_repeats = 1``);
``bench/reliability/failover.py`` runs them with more requests each and prints the scorecard.
Each scenario builds its own lab (``lab.lab``: simulators, a closed port or a black hole, and a
gateway routing over them as a demanding user configures it: connect 0.5 s, TTFT 1 s, two quick
retries, fallbacks ``a -> b -> c``), puts the fault on deployment ``a`` (or on all), asks,
judges every answer (``verdict.judge``), then heals the simulators and asks again, so that a
wrong or partial answer left in the cache fails the scenario.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from hasten.simulator.generation import generate_choices
from hasten.simulator.inputs import parse_chat_request
from tests.support.failover import fleet
from tests.support.failover.client import ask
from tests.support.failover.lab import (
    TTFT_TIMEOUT_S,
    Kind,
    Lab,
    answer_text,
    chat,
    lab,
)
from tests.support.failover.verdict import (
    Expectation,
    Outcome,
    Verdict,
    judge,
    judge_replay,
    worst,
)

# Past this without a complete answer a request is a hang (the gateway's total is 8 s).
BOUND_S = 12.0
# A healthy answer takes about 0.26 s; a failover may add the failed try.
ON_TIME_S = 1.5
ON_TIME_AFTER_TTFT_S = TTFT_TIMEOUT_S + 1.0


@dataclass(frozen=True, slots=True)
class Run:
    """How a scenario runs: its HTTP client, a tag that keeps its prompts its own (a cache
    hit from an earlier run would hide the fault), and how many requests it asks."""

    client: httpx.AsyncClient
    tag: str
    num_repeats: int = 1
    # False (the quick tests: no wall-clock thresholds on a noisy machine): an answer is
    # never late, only a hang (no answer within ``BOUND_S``) counts against time.
    is_timed: bool = True

    def question(self, scenario: str, index: int = 0) -> str:
        return f"failover {scenario} {self.tag} question {index}"

    def on_time(self, seconds: float) -> float:
        return seconds if self.is_timed else math.inf


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    pass_rule: str
    run: Callable[[Run], Awaitable[Verdict]]
    awaits: str = ""  # the feature whose arrival turns today's outcome into a pass


async def _ask_all(
    run: Run, env: Lab, bodies: Sequence[dict[str, Any]], on_time_s: float
) -> list[Verdict]:
    verdicts = []
    for body in bodies:
        seen = await ask(run.client, env.gateway_url, body, bound_s=BOUND_S)
        expected = Expectation(answer_text(body, env.output_tokens))
        verdicts.append(judge(seen, expected, run.on_time(on_time_s)))
    return verdicts


async def _replay_all(run: Run, env: Lab, bodies: Sequence[dict[str, Any]]) -> list[Verdict]:
    env.heal()
    verdicts = []
    for body in bodies:
        seen = await ask(run.client, env.gateway_url, body, bound_s=BOUND_S)
        verdicts.append(judge_replay(seen, Expectation(answer_text(body, env.output_tokens))))
    return verdicts


def summed(verdicts: Sequence[Verdict], replays: Sequence[Verdict] = ()) -> Verdict:
    """The worst verdict, timed by the slowest answer; a bad replay overrides."""
    found = worst([*verdicts, *replays])
    elapsed_s = max((v.elapsed_s for v in verdicts), default=0.0)
    note = found.note
    if len(verdicts) > 1:
        counts = {o: sum(v.outcome is o for v in verdicts) for o in Outcome}
        tally = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
        note = f"{tally}; {note}" if note else tally
    return Verdict(found.outcome, note, elapsed_s)


def _fault_on_a(
    name: str,
    kinds: Sequence[Kind],
    fault: dict[str, Any],
    *,
    on_time_s: float = ON_TIME_S,
    is_stream: bool = True,
    temperature: float = 0.0,
    is_stream_upstream: bool = True,
    burst: int = 0,
) -> Callable[[Run], Awaitable[Verdict]]:
    """The common shape: a fault on ``a``, healthy ``b`` and ``c``, requests one by one."""

    async def scenario(run: Run) -> Verdict:
        with lab(kinds, is_stream_upstream=is_stream_upstream) as env:
            if fault:
                env["a"].configure(**fault)
            if burst:
                env["a"].burst(burst)
            bodies = [
                chat(run.question(name, i), is_stream=is_stream, temperature=temperature)
                for i in range(run.num_repeats)
            ]
            verdicts = await _ask_all(run, env, bodies, on_time_s)
            return summed(verdicts, await _replay_all(run, env, bodies))

    return scenario


def _cut_mid_answer(name: str, *, temperature: float) -> Callable[[Run], Awaitable[Verdict]]:
    """``a`` drops the connection after the role chunk and half the tokens (the client has
    text by then). Deterministic: the full text must equal the uncut answer; otherwise any
    answer that goes on from what was sent, ending with [DONE], passes."""

    async def scenario(run: Run) -> Verdict:
        with lab(("sim", "sim", "sim")) as env:
            env["a"].configure(disconnect_rate=1.0)
            verdicts = []
            bodies = []
            for i in range(run.num_repeats):
                body = chat(run.question(name, i), temperature=temperature)
                bodies.append(body)
                full = answer_text(body, env.output_tokens)
                expected = Expectation(full)
                if temperature > 0:
                    expected = Expectation(None, prefix=sent_before_cut(body, env.output_tokens))
                seen = await ask(run.client, env.gateway_url, body, bound_s=BOUND_S)
                verdicts.append(judge(seen, expected, run.on_time(ON_TIME_S)))
            return summed(verdicts, await _replay_all(run, env, bodies))

    return scenario


def sent_before_cut(body: dict[str, Any], output_tokens: int) -> str:
    """The text a simulator sends before its default disconnect: half the tokens."""
    pieces = generate_choices(parse_chat_request(body), output_tokens, None)[0].pieces
    return "".join(pieces[: output_tokens // 2])


async def _rate_limited(run: Run) -> Verdict:
    """Requests 0.1 s apart while ``a`` answers 429 with Retry-After 0.5 s: after its first
    429, ``a`` should be left alone for the 0.5 s it asked for."""
    name = "rate_limited_429"
    with lab(SIMS) as env:
        env["a"].configure(rate_limit_rate=1.0, retry_after_s=0.5)
        bodies = [chat(run.question(name, i)) for i in range(3 * run.num_repeats)]
        verdicts = []
        for body in bodies:
            verdicts.extend(await _ask_all(run, env, [body], ON_TIME_S))
            await asyncio.sleep(0.1)
        num_on_a = env["a"].num_requests()
        found = summed(verdicts, await _replay_all(run, env, bodies))
    # One 429 per 0.5 s window, and the requests span about num_asks x (0.26 + 0.1) s.
    allowed = 1 + math.ceil(len(bodies) * 0.36 / 0.5)
    note = f"a asked {num_on_a} times for {len(bodies)} requests (<= {allowed})"
    outcome = found.outcome
    if outcome is Outcome.PASS and num_on_a > allowed:
        outcome = Outcome.PARTIAL
    return Verdict(outcome, f"{note}; {found.note}", found.elapsed_s)


async def _one_degrading(run: Run) -> Verdict:
    """Three equal deployments; ``c``'s first token goes from 20 ms to 800 ms."""
    name = "one_of_three_degrading"
    with lab(("sim", "sim", "sim"), is_tiered=False) as env:
        warm = [chat(run.question(name, -1 - i)) for i in range(6)]
        await _ask_all(run, env, warm, BOUND_S)
        env["c"].configure(ttft_base_ms=800.0)
        before = env["c"].num_requests()
        num_asks = 8 + 16 * (run.num_repeats - 1)
        bodies = [chat(run.question(name, i)) for i in range(num_asks)]
        verdicts = await _ask_all(run, env, bodies, ON_TIME_S)
        num_on_c = env["c"].num_requests() - before
        found = summed(verdicts, await _replay_all(run, env, bodies[:4]))
    allowed = max(3, num_asks // 10)
    note = f"{num_on_c} of {num_asks} requests went to the degraded deployment (<= {allowed})"
    outcome = found.outcome
    if outcome is Outcome.PASS and num_on_c > allowed:
        outcome = Outcome.PARTIAL
    return Verdict(outcome, f"{note}; {found.note}", found.elapsed_s)


async def _all_down_then_one_recovers(run: Run) -> Verdict:
    """Every deployment answers 503; a request meanwhile must fail cleanly. Then ``c``
    recovers: within its breaker's cooldown and a second, requests must pass again."""
    name = "all_down_then_one_recovers"
    with lab(("sim", "sim", "sim")) as env:
        for deployment in env.deployments:
            deployment.burst(1_000_000)
        down = await _ask_all(run, env, [chat(run.question(name, -1))], ON_TIME_S)
        if down[0].outcome is Outcome.FAIL:
            return Verdict(Outcome.FAIL, f"while all were down: {down[0].note}", down[0].elapsed_s)
        env["c"].burst(0)
        recovered = await _until_recovered(run, env, name)
        if recovered is None:
            return Verdict(Outcome.FAIL, "no answer within 10 s of the recovery", 10.0)
        seconds, verdicts = recovered
        found = summed(verdicts)
        note = f"down: {down[0].note}; first answer {seconds:.2f} s after the recovery"
        outcome = found.outcome
        if outcome is Outcome.PASS and seconds > run.on_time(RECOVERY_ON_TIME_S):
            outcome = Outcome.PARTIAL
        return Verdict(outcome, f"{note}; {found.note}" if found.note else note, seconds)


RECOVERY_ON_TIME_S = 3.0  # the breaker's 1 s cooldown (2 s at most), then one answer
RECOVERY_GIVE_UP_S = 10.0


async def _until_recovered(run: Run, env: Lab, name: str) -> tuple[float, list[Verdict]] | None:
    started_s = time.perf_counter()
    index = 0
    while time.perf_counter() - started_s < RECOVERY_GIVE_UP_S:
        body = chat(run.question(name, index))
        index += 1
        seen = await ask(run.client, env.gateway_url, body, bound_s=BOUND_S)
        expected = Expectation(answer_text(body, env.output_tokens))
        verdict = judge(seen, expected, run.on_time(ON_TIME_S))
        if verdict.outcome is Outcome.FAIL:
            return time.perf_counter() - started_s, [verdict]
        if verdict.outcome is Outcome.PASS:
            seconds = time.perf_counter() - started_s
            after = [chat(run.question(name, 1000 + i)) for i in range(3 * run.num_repeats)]
            return seconds, [verdict, *await _ask_all(run, env, after, ON_TIME_S)]
        await asyncio.sleep(0.1)
    return None


SIMS: tuple[Kind, ...] = ("sim", "sim", "sim")

CATALOGUE: tuple[Scenario, ...] = (
    Scenario(
        "connection_refused",
        "a's port is closed: the full answer from b within 1.5 s",
        _fault_on_a("connection_refused", ("refused", "sim", "sim"), {}),
    ),
    Scenario(
        "burst_5xx",
        "a answers 503 to its next 4 requests, then recovers: full answers within 1.5 s",
        _fault_on_a("burst_5xx", SIMS, {}, burst=4),
    ),
    Scenario(
        "rate_limited_429",
        "a answers 429 with Retry-After 0.5 s: the full answer within 1.5 s, and a is not "
        "asked again within its Retry-After",
        _rate_limited,
    ),
    Scenario(
        "slow_first_token",
        "a's first token takes 4 s (TTFT timeout 1 s): the full answer within 2 s",
        _fault_on_a(
            "slow_first_token", SIMS, {"ttft_base_ms": 4000.0}, on_time_s=ON_TIME_AFTER_TTFT_S
        ),
    ),
    Scenario(
        "silent_upstream",
        "a reads the request and never answers: the full answer within 2 s",
        _fault_on_a("silent_upstream", SIMS, {"silent_rate": 1.0}, on_time_s=ON_TIME_AFTER_TTFT_S),
    ),
    Scenario(
        "hang_after_headers",
        "a sends 200 and SSE headers, then nothing: the full answer within 2 s",
        _fault_on_a("hang_after_headers", SIMS, {"hang_rate": 1.0}, on_time_s=ON_TIME_AFTER_TTFT_S),
    ),
    Scenario(
        "stream_cut_deterministic",
        "a drops the connection mid-answer (temperature 0): the client's text equals the "
        "uncut answer, ending with [DONE]",
        _cut_mid_answer("stream_cut_deterministic", temperature=0.0),
        awaits="stream resume (i13-resume)",
    ),
    Scenario(
        "stream_cut_nondeterministic",
        "a drops the connection mid-answer (temperature 0.8): one answer that goes on "
        "from what was sent, ending with [DONE]",
        _cut_mid_answer("stream_cut_nondeterministic", temperature=0.8),
        awaits="stream resume (i13-resume)",
    ),
    Scenario(
        "stream_truncated",
        "a's stream ends cleanly halfway through an event, without [DONE]: the full "
        "answer, or a clean error event",
        _fault_on_a("stream_truncated", SIMS, {"truncate_rate": 1.0}),
        awaits="stream resume (i13-resume)",
    ),
    Scenario(
        "malformed_sse",
        "a sends a data line that is not JSON mid-stream: the full answer with no garbage "
        "forwarded, or a clean error event",
        _fault_on_a("malformed_sse", SIMS, {"malformed_rate": 1.0}),
        awaits="stream resume (i13-resume)",
    ),
    Scenario(
        "whole_answer_cut_upstream",
        "a non-stream client; a drops the (assembled) upstream stream mid-answer, before "
        "any byte reached the client: the full answer from b within 1.5 s",
        _fault_on_a("whole_answer_cut_upstream", SIMS, {"disconnect_rate": 1.0}, is_stream=False),
        awaits="a failover of an assembled answer cut before any byte went out",
    ),
    Scenario(
        "whole_answer_malformed_upstream",
        "a non-stream client; a's (assembled) upstream stream carries an event that is not "
        "JSON: the full answer from b within 1.5 s",
        _fault_on_a(
            "whole_answer_malformed_upstream", SIMS, {"malformed_rate": 1.0}, is_stream=False
        ),
        awaits="a failover of an assembled answer cut before any byte went out",
    ),
    Scenario(
        "truncated_json",
        "a (stream_upstream off) sends a complete 200 whose JSON is cut midway: the full "
        "answer from b within 1.5 s",
        _fault_on_a(
            "truncated_json",
            SIMS,
            {"truncate_rate": 1.0},
            is_stream=False,
            is_stream_upstream=False,
        ),
    ),
    Scenario(
        "dns_connect_timeout",
        "a's connects time out (SYNs dropped; connect timeout 0.5 s): the full answer within 2.5 s",
        _fault_on_a("dns_connect_timeout", ("blackhole", "sim", "sim"), {}, on_time_s=2.5),
    ),
    Scenario(
        "one_of_three_degrading",
        "three equal deployments, c's TTFT 20 -> 800 ms: every answer right within 1.5 s, "
        "and c gets at most 10% (at least 3 allowed) of the requests after it degrades",
        _one_degrading,
    ),
    Scenario(
        "all_down_then_one_recovers",
        "all three answer 503: a clean error meanwhile; c recovers: answers again within "
        "3 s, every one right",
        _all_down_then_one_recovers,
    ),
    Scenario(
        "redis_lost_mid_stream",
        "two replicas, cache and [fleet] on Redis, the same stream asked of both; "
        "redis-server stopped mid-stream: both clients and the next request get the full "
        "answer within 5.6 s (the 2 s stream, a 2 s lease, 1.5 s)",
        fleet.redis_lost_mid_stream,
        awaits="cross-replica coalescing (i13-coalesce)",
    ),
    Scenario(
        "replica_killed_mid_stream",
        "two replicas sharing Redis; the one streaming an answer is SIGKILLed: the client "
        "of the other replica gets the full answer within 5.6 s, at most 2 upstream calls",
        fleet.replica_killed_mid_stream,
        awaits="cross-replica coalescing (i13-coalesce)",
    ),
)


def scenario(name: str) -> Scenario:
    return next(s for s in CATALOGUE if s.name == name)

"""Carrying out one routing decision: the hedge race, TTFT timeouts, retries and failover.

``Dispatch.run`` walks the pool's ranking for one request. Nothing reaches the client until
an attempt is ready (see ``hasten.upstream.attempt``), so the gateway is free to
- hedge: when the running attempt has no token by its deployment's hedge delay, start the
  same request on the next deployment (budget permitting); with ``max_hedges = 2``, when
  that hedge is late too (``second_hedge_gap_s`` after it), a second hedge to a third
  deployment; the first ready attempt wins and every other is cancelled at once, which
  closes its connection so the upstream stops work;
- fail over: on a TTFT or first-byte timeout, or any failure, move to the next deployment;
  on a connect error or retryable status with no untried peer of equal priority left, retry
  the same deployment first (backoff, Retry-After), as the single-upstream client always did.
All within the request's deadline. Every outcome is reported to the pool, which decides.
The race ends in a value, ``Won`` or ``GaveUp`` (the last error response, or the last error),
for the caller to match on; nothing is raised to say how it went.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from hasten.apis.api import Api
from hasten.config import UpstreamConfig
from hasten.errors import HastenError, UpstreamError, UpstreamTimeout
from hasten.routing.gate import UpstreamGates
from hasten.routing.pool import DeploymentPool
from hasten.upstream.attempt import (
    BUSY,
    AttemptSpec,
    BufferedResponse,
    Failed,
    Ready,
    run_attempt,
)
from hasten.upstream.bridge import Bridging
from hasten.upstream.retry import retry_delay_s
from hasten.upstream.spans import end_attempt, start_attempt
from hasten.upstream.transport import Transport
from hasten.values.stage import NO_STAGE, Stage

_log = logging.getLogger("hasten.dispatch")
PRIMARY_HEADER = "x-hasten-primary"


@dataclass(frozen=True, slots=True)
class RequestTraits:
    """What the router may know about a client request."""

    is_stream: bool = False
    affinity_key: int | None = None
    expected_tokens: int = 0
    is_idempotent: bool = True  # False: never hedged (the request must not run twice)


@dataclass(slots=True)
class Decision:
    """What the router did for one request, built up while the race runs."""

    ranking: str = ""
    deployment: str = ""
    # "", "won", "lost" (the primary won after all), "denied" (by the budget); after a
    # second hedge was sent: "won:2", "won:1" (the first hedge won after all), "lost:2"
    hedge: str = ""
    failovers: list[str] = field(default_factory=list)
    primary: str = ""  # the first-ranked deployment

    def headers(self) -> dict[str, str]:
        headers = {"x-hasten-upstream": self.deployment, "x-hasten-route": self.ranking}
        if self.hedge:
            headers["x-hasten-hedge"] = self.hedge
        if self.hedge == "won":
            # For the time-saved estimate (hasten.metrics.saved); not passed to clients.
            headers[PRIMARY_HEADER] = self.primary
        if self.failovers:
            headers["x-hasten-failover"] = ", ".join(self.failovers)
        return headers


@dataclass(frozen=True, slots=True)
class Won:
    """The attempt that answered first. It still counts as in flight on ``name``: whoever
    reads it ends that with ``DeploymentPool.on_attempt_end`` once the response is closed."""

    name: str
    ready: Ready
    elapsed_ms: float  # from the start of the dispatch to the winner being ready
    deadline_s: float  # monotonic: the rest of the response must arrive by then
    headers: Mapping[str, str]  # the router's ``x-hasten-*`` account of the call
    span: Stage = NO_STAGE  # the winning attempt's, ended by whoever closes the response


@dataclass(frozen=True, slots=True)
class GaveUp:
    """Every try failed. ``last`` is what the client gets: the last upstream error response
    (passed through as is) or, when no upstream answered, the last error."""

    name: str  # the deployment ``last`` came from (for an error: the one tried last)
    last: BufferedResponse | HastenError
    deadline_s: float
    headers: Mapping[str, str]


@dataclass(slots=True)
class _Running:
    name: str
    started_s: float
    is_probe: bool
    hedge_level: int  # 0 the primary (or a failover), 1 the first hedge, 2 the second
    ttft_deadline_s: float | None
    span: Stage = NO_STAGE

    @property
    def is_hedge(self) -> bool:
        return self.hedge_level > 0


class Dispatch:
    def __init__(
        self,
        transport: Transport,
        pool: DeploymentPool,
        upstreams: Mapping[str, UpstreamConfig],
        request: RequestTraits,
        *,
        legs: Bridging,
        api: Api,
        rng: random.Random,
        trace: Stage = NO_STAGE,
        excluded: frozenset[str] = frozenset(),
        gates: UpstreamGates | None = None,
    ) -> None:
        self._transport, self._pool, self._upstreams = transport, pool, upstreams
        # Each upstream's in-flight cap, shared with every other route's dispatches.
        self._gates = gates or UpstreamGates()
        self._excluded = excluded  # deployments this request must not go to (a resumed stream)
        self._trace = trace  # the request's span: each attempt is a child
        self._request = request
        self._legs, self._api = legs, api
        self._rng = rng
        self._started_s = time.monotonic()
        self._order: list[str] = []
        self._num_tries: dict[str, int] = {}
        self._running: dict[asyncio.Task[Ready | Failed], _Running] = {}
        self._last: tuple[str, Failed] | None = None
        self._last_buffered: tuple[str, BufferedResponse] | None = None
        self._num_hedge_chances = 0  # hedge levels decided (fired, denied or nowhere to go)
        self._hedge_started_s: float | None = None  # when the first hedge was sent
        self._hedge_retry_s = 0.0  # a hedge the budget refused is asked for again from then
        self._decision = Decision()
        self._deadline_s = self._started_s

    @property
    def _is_hedging(self) -> bool:
        return self._pool.routing.hedge.is_enabled and self._request.is_idempotent

    async def run(self) -> Won | GaveUp:
        """The winning attempt, or what is left when every deployment failed."""
        now_s = time.monotonic()
        pool, request = self._pool, self._request
        pool.on_request(now_s)
        ranking = pool.rank(
            now_s, affinity_key=request.affinity_key, expected_tokens=request.expected_tokens
        )
        self._order = [name for name in ranking.order if name not in self._excluded]
        if not self._order:
            raise UpstreamError("no deployment is left to send the request to")
        self._decision.ranking = ranking.reason
        self._decision.primary = self._order[0]
        self._deadline_s = now_s + self._upstreams[self._order[0]].timeouts.total_s
        self._start(self._order[0])
        outcome: Won | GaveUp | None = None
        try:
            outcome = await self._race()
        finally:
            try:
                await self._cancel_running("lost" if isinstance(outcome, Won) else "cancelled")
            except BaseException:
                # Cancelled (the client left) while the losers unwound: nobody will close
                # the winner, so it is closed and counted out here.
                if isinstance(outcome, Won):
                    outcome.ready.response.close()
                    self._pool.on_attempt_end(outcome.name)
                    outcome.span.end()
                raise
        return outcome

    async def _race(self) -> Won | GaveUp:
        while True:
            if not self._running and not await self._start_after_failure():
                return self._give_up()
            timeout_s = max(0.0, self._next_wakeup_s() - time.monotonic())
            done, _ = await asyncio.wait(
                self._running, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            won = self._collect(done)
            if won is not None:
                return won
            now_s = time.monotonic()
            await self._expire_ttft(now_s)
            if now_s >= self._deadline_s:
                await self._cancel_running("cancelled")
                error = UpstreamTimeout(
                    "request deadline passed before the upstream answered",
                    code="upstream_total_timeout",
                )
                return self._gave_up(self._blame(), error)
            self._maybe_hedge(now_s)

    def _collect(self, done: set[asyncio.Task[Ready | Failed]]) -> Won | None:
        winner: tuple[_Running, Ready] | None = None
        now_s = time.monotonic()
        for task in done:
            info = self._running.pop(task)
            outcome = _outcome(task)
            if isinstance(outcome, Failed):
                self._record_failure(info, outcome, now_s)
            elif winner is None:
                self._record_win(info, outcome, now_s)
                winner = (info, outcome)
            else:  # two finished together: the later one is a loser like any other
                outcome.response.close()
                self._record_cancelled(info, now_s, "lost")
        if winner is None:
            return None
        # Built once all are collected: a failure that finished with the winner is named too.
        info, ready = winner
        elapsed_ms = (now_s - self._started_s) * 1000.0
        headers = self._decision.headers()
        return Won(info.name, ready, elapsed_ms, self._deadline_s, headers, info.span)

    def _record_win(self, info: _Running, ready: Ready, now_s: float) -> None:
        if ready.is_token:
            self._pool.on_first_token(
                info.name, ready.ttft_ms, now_s, is_probe=info.is_probe, started_s=info.started_s
            )
        else:  # a final 4xx: the deployment answered, but its latency says nothing
            self._pool.on_final_status(
                info.name, now_s, is_probe=info.is_probe, started_s=info.started_s
            )
        if self._decision.hedge == "fired":
            self._decision.hedge = "won" if info.is_hedge else "lost"
        elif self._decision.hedge == "fired:2":
            self._decision.hedge = ("lost:2", "won:1", "won:2")[info.hedge_level]
        self._decision.deployment = info.name
        status = ready.response.status
        end_attempt(info.span, "won", status=status, ttfb_ms=ready.ttft_ms, is_ended=False)

    def _record_failure(self, info: _Running, failed: Failed, now_s: float) -> None:
        elapsed_ms = (now_s - info.started_s) * 1000.0
        is_slow = failed.reason in ("ttft_timeout", "first_byte_timeout")
        if failed.reason == BUSY:
            # Refused before sending: says nothing of the upstream's health or latency.
            self._pool.on_busy(info.name, is_probe=info.is_probe, started_s=info.started_s)
        else:
            self._pool.on_failure(
                info.name,
                now_s,
                is_probe=info.is_probe,
                reason=failed.reason,
                elapsed_ms=elapsed_ms if is_slow else None,
                retry_after_s=failed.retry_after_s if failed.reason == "429" else None,
                started_s=info.started_s,
            )
        self._pool.on_attempt_end(info.name)
        self._decision.failovers.append(f"{info.name}={failed.reason}")
        self._last = (info.name, failed)
        if failed.buffered is not None:
            self._last_buffered = (info.name, failed.buffered)
        status = None if failed.buffered is None else failed.buffered.status
        end_attempt(info.span, "failed", status=status, reason=failed.reason, error=failed.error)

    def _record_cancelled(self, info: _Running, now_s: float, outcome: str) -> None:
        elapsed_ms = (now_s - info.started_s) * 1000.0
        self._pool.on_cancelled(
            info.name, elapsed_ms, now_s, is_probe=info.is_probe, started_s=info.started_s
        )
        self._pool.on_attempt_end(info.name)
        end_attempt(info.span, outcome)

    def _start(self, name: str, *, hedge_level: int = 0, after: str = "") -> None:
        """Starts an attempt on ``name``; ``after``: the failure that made it necessary."""
        now_s = time.monotonic()
        is_probe = self._pool.on_attempt_start(name, now_s)
        num_tries = self._num_tries.get(name, 0)
        span = start_attempt(
            self._trace,
            name,
            self._upstreams[name].url,
            self._api.path,
            index=sum(self._num_tries.values()),
            is_hedge=hedge_level > 0,
            is_retry=num_tries > 0,
            after=after,
        )
        self._num_tries[name] = num_tries + 1
        ttft_timeout_s = self._pool.ttft_timeout_s(name)
        deadline_s = None if ttft_timeout_s is None else now_s + ttft_timeout_s
        task = asyncio.get_running_loop().create_task(
            run_attempt(self._transport, self._spec(name, span.inject({})))
        )
        self._running[task] = _Running(name, now_s, is_probe, hedge_level, deadline_s, span)

    def _spec(self, name: str, trace_headers: Mapping[str, str]) -> AttemptSpec:
        deployment = self._pool.deployments[name].config
        key = self._request.affinity_key
        cache_key = None
        if deployment.is_prompt_cache_key and key is not None:
            cache_key = f"hasten-{key:016x}"
        upstream = self._upstreams[name]
        return AttemptSpec(
            upstream,
            self._legs,
            trace_headers,
            self._deadline_s,
            self._request.is_stream,
            self._api,
            cache_key,
            self._gates.gate(upstream.name, upstream.max_in_flight),
        )

    def _next_untried(self, *, is_eligible_only: bool) -> str | None:
        now_s = time.monotonic()
        for name in self._order:
            if name in self._num_tries:
                continue
            if is_eligible_only and not self._pool.deployments[name].is_eligible(now_s):
                continue
            return name
        return None

    async def _start_after_failure(self) -> bool:
        """Retries the failed deployment or moves on; False when nothing is left to try."""
        if self._last is None:
            return False
        name, failed = self._last
        if failed.is_retryable_here and not self._can_move_on(name):
            upstream = self._upstreams[name]
            delay_s = retry_delay_s(
                self._num_tries[name] - 1,
                upstream.retry,
                self._rng,
                retry_after_s=failed.retry_after_s,
                remaining_s=self._deadline_s - time.monotonic(),
            )
            if delay_s is not None:
                await asyncio.sleep(delay_s)
                self._start(name, after=failed.reason)
                return True
        following = self._next_untried(is_eligible_only=False)
        if following is None or time.monotonic() >= self._deadline_s:
            return False
        self._start(following, after=failed.reason)
        return True

    def _can_move_on(self, name: str) -> bool:
        """True when failing over beats retrying here: an untried peer of equal priority
        waits, or this deployment's breaker just opened (say, Retry-After) and any other
        healthy one is left. Otherwise the same deployment is retried, as it always was."""
        if self._has_untried_peer(name):
            return True
        is_tripped = not self._pool.deployments[name].breaker.is_available(time.monotonic())
        return is_tripped and self._next_untried(is_eligible_only=True) is not None

    def _has_untried_peer(self, name: str) -> bool:
        priority = self._pool.deployments[name].config.priority
        now_s = time.monotonic()
        return any(
            other not in self._num_tries
            and self._pool.deployments[other].config.priority == priority
            and self._pool.deployments[other].is_eligible(now_s)
            for other in self._order
        )

    def _hedge_at_s(self) -> float | None:
        """When the next hedge is due: the first when the one running attempt is late, the
        second when the first hedge is late too (whatever became of the primary)."""
        if not self._is_hedging or not self._running:
            return None
        if self._num_hedge_chances >= self._pool.routing.hedge.max_hedges:
            return None
        if self._num_hedge_chances == 0:
            if len(self._running) != 1:
                return None
            info = next(iter(self._running.values()))
            # Given the time, the pool postpones the hedge while the budget runs short.
            due_s = info.started_s + self._pool.hedge_delay_s(info.name, time.monotonic())
            return max(due_s, self._hedge_retry_s)
        if self._hedge_started_s is None:  # the first had nowhere to go
            return None
        return max(self._hedge_started_s + self._pool.second_hedge_gap_s(), self._hedge_retry_s)

    def _next_wakeup_s(self) -> float:
        times = [self._deadline_s]
        times.extend(i.ttft_deadline_s for i in self._running.values() if i.ttft_deadline_s)
        hedge_at_s = self._hedge_at_s()
        if hedge_at_s is not None:
            times.append(hedge_at_s)
        return min(times)

    def _maybe_hedge(self, now_s: float) -> None:
        hedge_at_s = self._hedge_at_s()
        if hedge_at_s is None or now_s < hedge_at_s:
            return
        level = self._num_hedge_chances + 1
        target = self._pool.hedge_target(self._order, self._num_tries, now_s, level=level)
        if target is None:
            self._num_hedge_chances = level  # one chance per level, or the wait loop would spin
            return
        if not self._pool.try_hedge(now_s, level=level):
            # Refused by the budget (which counts each refusal): with a token bucket, asked
            # again a little later, when the requests since have earned more, so a straggler's
            # wait still ends. A second hedge denied leaves the first's outcome as the header
            # says it.
            retry_s = self._pool.hedge_retry_s()
            if retry_s is None:
                self._num_hedge_chances = level
            else:
                self._hedge_retry_s = now_s + retry_s
            if level == 1:
                self._decision.hedge = "denied"
            return
        self._num_hedge_chances = level
        self._hedge_retry_s = 0.0
        self._decision.hedge = "fired" if level == 1 else "fired:2"
        if level == 1:
            self._hedge_started_s = now_s
        self._start(target, hedge_level=level)

    async def _expire_ttft(self, now_s: float) -> None:
        expired = [
            task
            for task, info in self._running.items()
            if info.ttft_deadline_s is not None and now_s >= info.ttft_deadline_s
        ]
        for task in expired:
            info = self._running.pop(task)
            _abandon(task)
            timeout_s = self._pool.ttft_timeout_s(info.name) or 0.0
            error = UpstreamTimeout(
                f"no first token from upstream {info.name!r} within {timeout_s:g} s",
                code="upstream_ttft_timeout",
            )
            # Counted out before waiting, so a client leaving meanwhile cannot skip it.
            self._record_failure(info, Failed("ttft_timeout", error), time.monotonic())
            await asyncio.wait([task])

    async def _cancel_running(self, outcome: str) -> None:
        """``outcome``: "lost" once another attempt won, "cancelled" otherwise."""
        running, self._running = self._running, {}
        if not running:
            return
        now_s = time.monotonic()
        for task, info in running.items():
            _abandon(task)
            self._record_cancelled(info, now_s, outcome)
        # Cancelled attempts close their connections as they unwind; wait for that, so the
        # upstream sees the hang-up before the winner's first byte reaches the client.
        await asyncio.wait(running)

    def _blame(self) -> str:
        """The deployment a failed request is reported on: the one it was tried on last."""
        if not self._decision.deployment:
            if self._last is not None:
                self._decision.deployment = self._last[0]
            elif self._order:
                self._decision.deployment = self._order[0]
        return self._decision.deployment

    def _give_up(self) -> GaveUp:
        blamed = self._blame()
        if self._last_buffered is not None:
            return self._gave_up(*self._last_buffered)
        if self._last is not None and self._last[1].error is not None:
            return self._gave_up(blamed, self._last[1].error)
        return self._gave_up(blamed, UpstreamError("no upstream available"))

    def _gave_up(self, name: str, last: BufferedResponse | HastenError) -> GaveUp:
        return GaveUp(name, last, self._deadline_s, self._decision.headers())


def _outcome(task: asyncio.Task[Ready | Failed]) -> Ready | Failed:
    """A finished attempt's outcome; an attempt that raised (a bug) is a failure too, so
    its in-flight count still comes down and the request still fails over."""
    exc = task.exception()
    if exc is None:
        return task.result()
    _log.error("upstream attempt raised", exc_info=exc)
    return Failed("internal_error", UpstreamError(f"upstream attempt failed: {type(exc).__name__}"))


def _abandon(task: asyncio.Task[Ready | Failed]) -> None:
    """Cancels an attempt nobody waits for; one that is (or still becomes) ready is closed."""
    task.cancel()
    task.add_done_callback(_close_if_ready)


def _close_if_ready(task: asyncio.Task[Ready | Failed]) -> None:
    if task.cancelled():
        return
    outcome = _outcome(task)
    if isinstance(outcome, Ready):
        outcome.response.close()  # ready at the last moment: too late all the same

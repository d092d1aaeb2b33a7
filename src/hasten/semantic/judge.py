"""The asynchronous judge: near-miss pairs judged in the background, never on the request.

A lookup that came close but was not served ``submit``s its pair (``judge_rules.JudgeCase``)
and answers from the upstream as a miss at once. One worker task per judge works the
bounded queue: identical pairs share one judgement (and a recent verdict is reused), the
spend budget (judgements and tokens per minute) is charged when a pair is queued, so a pair
over budget is dropped at once (counted), and a judgement that fails or says anything but
yes/no is no verdict. Whoever waits for the verdict (``SemanticTier`` once the miss's fresh
answer is stored) waits at most ``timeout_s``.

Backends (``JudgeBackend``): ``UpstreamJudge`` asks a model a one-token yes/no question
through the gateway's upstream path (``semantic.judge_upstream``); ``VerifierJudge`` asks
the local ``verifier`` and says yes at or above a similarity measured on the dev files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from hasten.semantic import nomic
from hasten.semantic.judge_rules import (
    JudgeCase,
    SpendBudget,
    SpendPolicy,
    estimated_tokens,
)
from hasten.semantic.verifier import Verifier

_log = logging.getLogger("hasten.semantic")
DEFAULT_MAX_QUEUED = 256
DEFAULT_TIMEOUT_S = 30.0
# Verdicts remembered, so a pair asked again within a while is not paid for twice.
NUM_VERDICTS_KEPT = 4096
# USE v3 cosine at which the local verifier says yes. bench/semantic_judge.py (band 0.45):
# on qqp_dev (2,000) its yes was right on 0.77 / 0.78 / 0.79 of pairs at 0.8 / 0.85 / 0.9,
# hardly above the share of right pairs in the band (0.76): a weak judge, which is why an
# alias also needs the answers to agree, and why the judge is off by default.
VERIFIER_YES_SIMILARITY = 0.85
# nomic-embed-text-v1.5's cosines of paraphrases sit higher: its own cut-off, measured the
# same way (bench/semantic_judge.py --verifier nomic): its yes was right on 0.76 / 0.77 /
# 0.81 / 0.84 of qqp_dev pairs at 0.85 / 0.9 / 0.93 / 0.95 (GPTCache's set 0.97 throughout,
# zh 0.64-0.66); the highest, precision first.
NOMIC_YES_SIMILARITY = 0.95
_YES_SIMILARITY_BY_VERIFIER = {nomic.NAME: NOMIC_YES_SIMILARITY}


def yes_similarity_of(verifier_name: str) -> float:
    """The similarity at which a verifier's judge says yes (USE's for unknown names)."""
    return _YES_SIMILARITY_BY_VERIFIER.get(verifier_name, VERIFIER_YES_SIMILARITY)


@dataclass(frozen=True, slots=True)
class Judged:
    """A backend's answer: ``verdict`` None when it said neither yes nor no (or failed);
    ``num_tokens`` what it really cost, when the upstream reported usage."""

    verdict: bool | None
    num_tokens: int | None = None


class JudgeBackend(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def is_metered(self) -> bool:
        """Whether a judgement costs tokens (the token budget applies)."""
        ...

    async def judge(self, case: JudgeCase) -> Judged: ...


class Ticket:
    """One queued pair and the verdict it will get (None: dropped, late or unclear)."""

    __slots__ = ("case", "estimate", "verdict")

    def __init__(self, case: JudgeCase, estimate: int, verdict: asyncio.Future[bool | None]):
        self.case, self.estimate, self.verdict = case, estimate, verdict


class AsyncJudge:
    """The queue, the budget and the worker around one ``backend``.

    ``counts``: by script (latin, cjk, other), the store's per-script counters of the judge
    (``judged``, ``judge_yes``, ``judge_no``, ``judge_unclear``, ``judge_dropped_budget``,
    ``judge_dropped_queue``, ``judge_errors``, ``judge_deduped``, ``judge_late``)."""

    def __init__(
        self,
        backend: JudgeBackend,
        policy: SpendPolicy,
        *,
        counts: defaultdict[str, Counter[str]],
        max_queued: int = DEFAULT_MAX_QUEUED,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.budget = SpendBudget(policy)
        self.counts = counts
        self.timeout_s = timeout_s
        self._max_queued = max_queued
        self._clock = clock
        self._queue: deque[Ticket] = deque()
        self._pending: dict[tuple[str, str, str, int], Ticket] = {}
        self._verdicts: OrderedDict[tuple[str, str, str, int], bool] = OrderedDict()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    def submit(self, case: JudgeCase) -> Ticket | None:
        """Queues ``case`` (or joins its identical pair); None when it is dropped."""
        counts = self.counts[case.script]
        loop = asyncio.get_running_loop()
        known = self._verdicts.get(case.key)
        if known is not None:
            self._verdicts.move_to_end(case.key)
            counts["judge_reused"] += 1
            return Ticket(case, 0, _done(loop, known))
        pending = self._pending.get(case.key)
        if pending is not None:
            counts["judge_deduped"] += 1
            return pending
        if len(self._queue) >= self._max_queued:
            counts["judge_dropped_queue"] += 1
            return None
        estimate = estimated_tokens(case.asked, case.stored) if self.backend.is_metered else 0
        if not self.budget.try_spend(self._clock(), estimate):
            counts["judge_dropped_budget"] += 1
            return None
        ticket = Ticket(case, estimate, loop.create_future())
        self._pending[case.key] = ticket
        self._queue.append(ticket)
        self._start()
        return ticket

    async def wait(self, ticket: Ticket) -> bool | None:
        """The verdict, or None when it does not come within ``timeout_s``."""
        try:
            return await asyncio.wait_for(asyncio.shield(ticket.verdict), self.timeout_s)
        except TimeoutError:
            self.counts[ticket.case.script]["judge_late"] += 1
            return None

    def _start(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            while self._queue:
                await self._judge(self._queue.popleft())
            self._wake.clear()
            await self._wake.wait()

    async def _judge(self, ticket: Ticket) -> None:
        case, counts = ticket.case, self.counts[ticket.case.script]
        verdict: bool | None = None
        try:
            judged = await asyncio.wait_for(self.backend.judge(case), self.timeout_s)
        except Exception:  # a judge that fails only costs the alias it could have made
            counts["judge_errors"] += 1
            if counts["judge_errors"] == 1:
                _log.warning("semantic judge %s failed", self.backend.name, exc_info=True)
        else:
            verdict = judged.verdict
            counts["judged"] += 1
            counts[{True: "judge_yes", False: "judge_no", None: "judge_unclear"}[verdict]] += 1
            if judged.num_tokens is not None:
                self.budget.correct(ticket.estimate, judged.num_tokens)
            if verdict is not None:
                self._remember(case, verdict)
        self._pending.pop(case.key, None)
        if not ticket.verdict.done():
            ticket.verdict.set_result(verdict)

    def _remember(self, case: JudgeCase, verdict: bool) -> None:
        self._verdicts[case.key] = verdict
        while len(self._verdicts) > NUM_VERDICTS_KEPT:
            self._verdicts.popitem(last=False)

    async def aclose(self) -> None:
        """Stops the worker; whatever waits gets no verdict."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        for ticket in [*self._queue, *self._pending.values()]:
            if not ticket.verdict.done():
                ticket.verdict.set_result(None)
        self._queue.clear()
        self._pending.clear()


def _done(loop: asyncio.AbstractEventLoop, verdict: bool) -> asyncio.Future[bool | None]:
    future: asyncio.Future[bool | None] = loop.create_future()
    future.set_result(verdict)
    return future


class VerifierJudge:
    """The local verifier as judge: yes when its similarity reaches ``yes_similarity``.

    ``run`` puts the (blocking) verifier on the thread it lives on: the semantic store's
    worker, which the store's own close-call verifier uses too."""

    def __init__(
        self,
        verifier: Verifier,
        run: Callable[[Callable[[], float]], Awaitable[float]],
        *,
        yes_similarity: float | None = None,
    ) -> None:
        """``yes_similarity``: None for the verifier's own (``yes_similarity_of``)."""
        self._verifier = verifier
        self._run = run
        self.yes_similarity = (
            yes_similarity_of(verifier.name) if yes_similarity is None else yes_similarity
        )

    @property
    def name(self) -> str:
        return f"verifier:{self._verifier.name}"

    @property
    def is_metered(self) -> bool:
        return False

    async def judge(self, case: JudgeCase) -> Judged:
        similarity = await self._run(lambda: self._verifier.similarity(case.asked, case.stored))
        return Judged(similarity >= self.yes_similarity)

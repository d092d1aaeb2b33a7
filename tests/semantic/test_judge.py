"""The asynchronous judge: queue, dedupe, budget, failures, and its two backends."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from hasten.semantic.judge import AsyncJudge, Judged, VerifierJudge
from hasten.semantic.judge_rules import JudgeCase, SpendPolicy
from hasten.semantic.judge_upstream import UpstreamJudge, read_verdict


def _case(asked: str = "how do i cook rice", entry_id: int = 1, tenant: str = "t") -> JudgeCase:
    return JudgeCase(tenant, "p", "gpt-x", asked, "how to cook rice", entry_id, "k1", 0.2)


class Scripted:
    """A backend answering ``verdict`` (or raising it), after ``gate`` opens if given."""

    name = "scripted"
    is_metered = False

    def __init__(self, verdict: bool | Exception | None = True) -> None:
        self.verdict = verdict
        self.cases: list[JudgeCase] = []
        self.gate: asyncio.Event | None = None

    async def judge(self, case: JudgeCase) -> Judged:
        self.cases.append(case)
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return Judged(self.verdict)


def _judge(backend: Any, **settings: Any) -> tuple[AsyncJudge, defaultdict[str, Counter[str]]]:
    counts: defaultdict[str, Counter[str]] = defaultdict(Counter)
    policy = settings.pop("policy", SpendPolicy())
    return AsyncJudge(backend, policy, counts=counts, clock=lambda: 0.0, **settings), counts


async def test_identical_pairs_share_one_judgement_and_its_verdict_is_reused() -> None:
    backend = Scripted(True)
    judge, counts = _judge(backend)
    first, second = judge.submit(_case()), judge.submit(_case())
    assert first is not None and first is second
    assert await judge.wait(first) is True
    again = judge.submit(_case())
    assert again is not None and await judge.wait(again) is True
    assert len(backend.cases) == 1
    assert counts["latin"] == Counter(judged=1, judge_yes=1, judge_deduped=1, judge_reused=1)
    await judge.aclose()


async def test_a_full_queue_and_an_empty_budget_drop_pairs_at_once() -> None:
    judge, counts = _judge(Scripted(True), max_queued=1)
    assert judge.submit(_case(entry_id=1)) is not None
    assert judge.submit(_case(entry_id=2)) is None  # the worker has not taken the first yet
    assert counts["latin"]["judge_dropped_queue"] == 1
    await judge.aclose()
    judge, counts = _judge(Scripted(True), policy=SpendPolicy(max_per_minute=1))
    ticket = judge.submit(_case(entry_id=1))
    assert ticket is not None and await judge.wait(ticket) is True
    assert judge.submit(_case(entry_id=2)) is None  # the minute's one judgement is spent
    assert counts["latin"]["judge_dropped_budget"] == 1 and counts["latin"]["judged"] == 1
    await judge.aclose()


async def test_the_token_budget_applies_to_metered_backends_only() -> None:
    class Metered(Scripted):
        is_metered = True

    policy = SpendPolicy(max_per_minute=100, max_tokens_per_minute=10)
    judge, counts = _judge(Metered(True), policy=policy)
    assert judge.submit(_case()) is None  # a prompt costs more than 10 tokens
    assert counts["latin"]["judge_dropped_budget"] == 1
    free, _ = _judge(Scripted(True), policy=policy)
    assert free.submit(_case()) is not None
    await judge.aclose()
    await free.aclose()


async def test_failures_and_unclear_answers_are_no_verdict() -> None:
    judge, counts = _judge(Scripted(RuntimeError("down")))
    ticket = judge.submit(_case())
    assert ticket is not None and await judge.wait(ticket) is None
    assert counts["latin"]["judge_errors"] == 1 and "judged" not in counts["latin"]
    await judge.aclose()
    judge, counts = _judge(Scripted(None))
    ticket = judge.submit(_case())
    assert ticket is not None and await judge.wait(ticket) is None
    assert counts["latin"]["judge_unclear"] == 1
    assert judge.submit(_case()) is not None and len(counts["latin"]) == 2  # not remembered
    await judge.aclose()


async def test_waiting_is_bounded_and_closing_answers_every_waiter() -> None:
    backend = Scripted(True)
    backend.gate = asyncio.Event()  # never opened: the judgement never ends by itself
    judge, counts = _judge(backend, timeout_s=0.01)
    ticket = judge.submit(_case())
    assert ticket is not None and await judge.wait(ticket) is None
    assert counts["latin"]["judge_late"] == 1
    slow, _ = _judge(Scripted(True))
    pending = slow.submit(_case())
    assert pending is not None
    await slow.aclose()
    assert pending.verdict.done() and pending.verdict.result() is None
    await judge.aclose()


class _Verifier:
    name = "fake-verifier"

    def __init__(self, similarity: float) -> None:
        self.value = similarity

    def similarity(self, query: str, candidate: str) -> float:
        return self.value


async def _direct(operation: Callable[[], float]) -> float:
    return operation()


@pytest.mark.parametrize(("similarity", "verdict"), [(0.9, True), (0.85, True), (0.84, False)])
async def test_the_verifier_says_yes_at_its_similarity(similarity: float, verdict: bool) -> None:
    judge = VerifierJudge(_Verifier(similarity), _direct, yes_similarity=0.85)
    assert judge.name == "verifier:fake-verifier" and not judge.is_metered
    assert (await judge.judge(_case())).verdict is verdict


def _completion(content: str, total_tokens: int | None = 42) -> bytes:
    body: dict[str, Any] = {"choices": [{"index": 0, "message": {"content": content}}]}
    if total_tokens is not None:
        body["usage"] = {"total_tokens": total_tokens}
    return orjson.dumps(body)


async def test_the_upstream_judge_asks_one_token_at_temperature_zero() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    async def send(model: str, body: dict[str, Any]) -> tuple[int, bytes]:
        sent.append((model, body))
        return 200, _completion("Yes")

    assert await UpstreamJudge(send).judge(_case()) == Judged(True, 42)
    assert await UpstreamJudge(send, model="judge-model").judge(_case()) == Judged(True, 42)
    assert [model for model, _ in sent] == ["gpt-x", "judge-model"]
    body = sent[0][1]
    assert body["max_tokens"] == 1 and body["temperature"] == 0 and body["stream"] is False
    assert "how do i cook rice" in body["messages"][0]["content"]


def test_reading_the_upstreams_verdict() -> None:
    assert read_verdict(200, _completion("no", None)) == Judged(False, None)
    assert read_verdict(200, _completion("Perhaps")) == Judged(None, 42)
    with pytest.raises(ValueError, match="429"):
        read_verdict(429, b"{}")

"""The failover conformance suite, quick: every scenario of the catalogue once.

Each must be at least safe-fail today (never a hang, a traceback, a wrong or corrupt
answer, or a partial answer cached), and pass where the gateway passes today. The
catalogue and its rules are ``tests/support/failover/``; ``bench/reliability/failover.py`` runs
the same scenarios with more requests each and times them (here no answer is ever late: only a
hang counts against time, the machine being noisy).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest

from tests.support.blackhole import Blackhole, connect_times_out
from tests.support.failover.scenarios import CATALOGUE, Run, Scenario
from tests.support.failover.verdict import (
    Expectation,
    Observation,
    Outcome,
    Verdict,
    judge,
    judge_replay,
    worst,
)
from tests.support.servers import free_port


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.mark.parametrize("scenario", CATALOGUE, ids=[s.name for s in CATALOGUE])
async def test_scenario(scenario: Scenario, client: httpx.AsyncClient) -> None:
    verdict = await scenario.run(Run(client, uuid.uuid4().hex[:8], is_timed=False))
    # The goal is every scenario passing; a safe-fail is a regression here too.
    assert verdict.outcome is Outcome.PASS, verdict.note


SEEN_OK = Observation(200, "the answer", True, None, "", 0.5)


@pytest.mark.parametrize(
    ("seen", "outcome"),
    [
        (SEEN_OK, Outcome.PASS),
        (replace(SEEN_OK, elapsed_s=3.0), Outcome.PARTIAL),
        (replace(SEEN_OK, text="another answer"), Outcome.FAIL),
        (replace(SEEN_OK, problem="hang: no complete answer"), Outcome.FAIL),
        (replace(SEEN_OK, is_complete=False), Outcome.FAIL),
        (Observation(503, "", False, {"message": "down"}, "", 0.1), Outcome.SAFE_FAIL),
        (Observation(200, "the ans", False, {"message": "cut"}, "", 0.1), Outcome.SAFE_FAIL),
        (Observation(200, "an ans", False, {"message": "cut"}, "", 0.1), Outcome.FAIL),
    ],
)
def test_judge(seen: Observation, outcome: Outcome) -> None:
    assert judge(seen, Expectation("the answer"), on_time_s=1.0).outcome is outcome


def test_a_continued_answer_must_go_on_from_what_was_sent() -> None:
    expected = Expectation(None, prefix="the ans")
    assert judge(SEEN_OK, expected, 1.0).outcome is Outcome.PASS
    assert judge(replace(SEEN_OK, text="the ans"), expected, 1.0).outcome is Outcome.FAIL
    assert judge(replace(SEEN_OK, text="an answer"), expected, 1.0).outcome is Outcome.FAIL


def test_a_replay_must_be_right_wherever_it_came_from() -> None:
    expected = Expectation("the answer")
    assert judge_replay(SEEN_OK, expected).outcome is Outcome.PASS
    hit = replace(SEEN_OK, text="the", headers={"x-hasten-cache": "hit"})
    verdict = judge_replay(hit, expected)
    assert verdict.outcome is Outcome.FAIL and verdict.note.startswith("cached")


def test_the_worst_verdict_wins() -> None:
    verdicts = [Verdict(Outcome.PASS, ""), Verdict(Outcome.FAIL, "x"), Verdict(Outcome.PARTIAL, "")]
    assert worst(verdicts).note == "x"


def test_a_black_hole_times_connects_out_where_a_closed_port_refuses() -> None:
    with Blackhole() as hole:
        assert connect_times_out(hole.port, 0.3)
    assert not connect_times_out(free_port(), 0.3)

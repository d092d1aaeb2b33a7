"""Unit tests for hasten.upstream.dispatch: the race's result values, failover, retries,
hedges and deadlines, against a scripted transport; every path leaves in-flight at 0."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from hasten.apis.chat import CHAT_API
from hasten.config import UpstreamConfig
from hasten.config.routing import DeploymentConfig, HedgeConfig, RoutingConfig
from hasten.errors import UpstreamBusy, UpstreamConnectError, UpstreamError, UpstreamTimeout
from hasten.routing.breaker import BreakerState
from hasten.routing.gate import UpstreamGates
from hasten.routing.pool import DeploymentPool
from hasten.upstream.attempt import BufferedResponse
from hasten.upstream.bridge import NativeOnly
from hasten.upstream.dispatch import Dispatch, GaveUp, RequestTraits, Won
from tests.support.scripted import (
    QUICK_RETRY,
    Reply,
    ScriptedTransport,
    delta,
    sse,
    upstream,
)

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _dispatch(
    transport: ScriptedTransport,
    upstreams: Mapping[str, UpstreamConfig],
    *,
    routing: RoutingConfig | None = None,
    request: RequestTraits | None = None,
    deployments: tuple[DeploymentConfig, ...] | None = None,
    body: dict[str, Any] | None = None,
    gates: UpstreamGates | None = None,
) -> tuple[Dispatch, DeploymentPool]:
    tiers = deployments or tuple(
        DeploymentConfig(upstream=name, priority=i) for i, name in enumerate(upstreams)
    )
    pool = DeploymentPool(tiers, routing or RoutingConfig(), random.Random(1))
    dispatch = Dispatch(
        transport,
        pool,
        upstreams,
        request or RequestTraits(),
        legs=NativeOnly(
            "/chat/completions", orjson.dumps(body or BODY), {"content-type": "application/json"}
        ),
        api=CHAT_API,
        rng=random.Random(1),
        gates=gates,
    )
    return dispatch, pool


def _in_flight(pool: DeploymentPool) -> dict[str, int]:
    return {name: d.num_in_flight for name, d in pool.deployments.items()}


async def test_a_winner_is_returned_as_won_and_stays_in_flight_until_its_reader_ends_it() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a")})
    outcome = await dispatch.run()
    assert isinstance(outcome, Won)
    assert outcome.name == "a"
    assert await outcome.ready.response.read(1.0) == b'{"ok": true}'
    assert outcome.headers == {"x-hasten-upstream": "a", "x-hasten-route": "only"}
    assert outcome.elapsed_ms >= 0.0
    assert _in_flight(pool) == {"a": 1}  # the caller's to end, once it closed the response
    pool.on_attempt_end("a")
    assert _in_flight(pool) == {"a": 0}


async def test_results_are_frozen_values() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    outcome = await _dispatch(transport, {"a": upstream("a")})[0].run()
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.name = "b"  # type: ignore[misc]


async def test_retryable_statuses_give_up_with_the_last_error_response() -> None:
    busy = Reply(status=503, chunks=(b'{"error": "busy"}',), headers={"Retry-After": "0"})
    transport = ScriptedTransport({"a": [busy]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a", retry=QUICK_RETRY)})
    outcome = await dispatch.run()  # returned, not raised
    assert isinstance(outcome, GaveUp)
    assert outcome.name == "a"
    assert isinstance(outcome.last, BufferedResponse)
    assert outcome.last.status == 503 and outcome.last.body == b'{"error": "busy"}'
    assert outcome.last.headers["retry-after"] == "0"  # lower-cased for the retry policy
    assert len(transport.sent) == 3  # the first try and two retries
    assert outcome.headers["x-hasten-upstream"] == "a"
    assert outcome.headers["x-hasten-failover"] == "a=503, a=503, a=503"
    assert all(r.is_closed for r in transport.responses)
    assert _in_flight(pool) == {"a": 0}


async def test_nothing_answered_gives_up_with_the_last_error() -> None:
    refused = Reply(error=UpstreamConnectError("connection refused"))
    transport = ScriptedTransport({"a": [refused], "b": [refused]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a"), "b": upstream("b")})
    outcome = await dispatch.run()
    assert isinstance(outcome, GaveUp)
    assert isinstance(outcome.last, UpstreamConnectError)
    assert outcome.name == "b"  # tried last
    assert outcome.headers["x-hasten-upstream"] == "b"
    assert outcome.headers["x-hasten-failover"] == "a=connect_error, b=connect_error"
    assert outcome.last.headers == {}  # the caller decides what the client sees
    assert _in_flight(pool) == {"a": 0, "b": 0}


async def test_a_failure_fails_over_to_the_next_deployment() -> None:
    transport = ScriptedTransport({"a": [Reply(status=503)], "b": [Reply()]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a"), "b": upstream("b")})
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-upstream"] == "b"
    assert outcome.headers["x-hasten-failover"] == "a=503"
    assert _in_flight(pool) == {"a": 0, "b": 1}


async def test_a_final_client_error_wins_without_a_latency_sample() -> None:
    transport = ScriptedTransport({"a": [Reply(status=400)], "b": [Reply()]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a"), "b": upstream("b")})
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "a"
    assert outcome.ready.response.status == 400 and not outcome.ready.is_token
    assert pool.deployments["a"].estimate.num_samples == 0
    assert transport.sent_to("b") == []


async def test_the_deadline_gives_up_with_a_timeout_and_cancels_the_attempt() -> None:
    transport = ScriptedTransport({"a": [Reply(head_delay_s=5.0)]})
    dispatch, pool = _dispatch(transport, {"a": upstream("a", total_s=0.1)})
    outcome = await dispatch.run()
    assert isinstance(outcome, GaveUp)
    assert isinstance(outcome.last, UpstreamTimeout)
    assert outcome.last.code == "upstream_total_timeout"
    assert outcome.headers["x-hasten-upstream"] == "a"
    assert _in_flight(pool) == {"a": 0}
    assert pool.deployments["a"].num_cancelled == 1


async def test_a_ttft_timeout_fails_over() -> None:
    slow = Reply(chunks=sse(delta("late")), chunk_delay_s=5.0)
    transport = ScriptedTransport({"a": [slow], "b": [Reply(chunks=sse(delta("hi"), "[DONE]"))]})
    dispatch, pool = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(ttft_timeout_s=0.05),
        request=RequestTraits(is_stream=True),
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-failover"] == "a=ttft_timeout"
    assert outcome.ready.head == list(sse(delta("hi")))
    assert _in_flight(pool) == {"a": 0, "b": 1}


# The sliding window unless a test says otherwise: one request in it affords one hedge.
HEDGE_SOON = HedgeConfig(
    is_enabled=True, min_delay_ms=10.0, max_delay_ms=20.0, budget=1.0, budget_burst=0.0
)
PRIMARY_THEN_HEDGE = (DeploymentConfig(upstream="a"), DeploymentConfig(upstream="b", priority=1))


async def test_a_hedge_that_answers_first_wins_and_the_straggler_is_cancelled() -> None:
    transport = ScriptedTransport({"a": [Reply(head_delay_s=5.0)], "b": [Reply()]})
    dispatch, pool = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(hedge=HEDGE_SOON),
        deployments=PRIMARY_THEN_HEDGE,
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"
    assert pool.deployments["a"].num_cancelled == 1
    assert _in_flight(pool) == {"a": 0, "b": 1}


async def test_a_hedge_the_budget_cannot_afford_is_denied() -> None:
    transport = ScriptedTransport({"a": [Reply(head_delay_s=0.1)], "b": [Reply()]})
    dispatch, _ = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(hedge=dataclasses.replace(HEDGE_SOON, budget=0.5)),
        deployments=PRIMARY_THEN_HEDGE,
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "a"
    assert outcome.headers["x-hasten-hedge"] == "denied"
    assert transport.sent_to("b") == []


async def test_a_request_that_must_not_run_twice_is_not_hedged() -> None:
    transport = ScriptedTransport({"a": [Reply(head_delay_s=0.1)], "b": [Reply()]})
    dispatch, _ = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(hedge=HEDGE_SOON),
        deployments=PRIMARY_THEN_HEDGE,
        request=RequestTraits(is_idempotent=False),
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "a"
    assert transport.sent_to("b") == []
    assert "x-hasten-hedge" not in outcome.headers


async def _sent_body(is_prompt_cache_key: bool, body: dict[str, Any], key: int | None) -> Any:
    deployment = DeploymentConfig(upstream="a", is_prompt_cache_key=is_prompt_cache_key)
    transport = ScriptedTransport({"a": [Reply()]})
    dispatch, _ = _dispatch(
        transport,
        {"a": upstream("a")},
        deployments=(deployment,),
        request=RequestTraits(affinity_key=key),
        body=body,
    )
    await dispatch.run()
    sent = transport.sent[0].body
    assert sent is not None
    return orjson.loads(sent)


async def test_prompt_cache_key_is_set_only_for_upstreams_configured_with_it() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert (await _sent_body(True, body, 0xABC))["prompt_cache_key"] == "hasten-0000000000000abc"
    assert "prompt_cache_key" not in await _sent_body(False, body, 0xABC)
    assert "prompt_cache_key" not in await _sent_body(True, body, None)  # no affinity key
    own = {**body, "prompt_cache_key": "mine"}
    assert (await _sent_body(True, own, 0xABC))["prompt_cache_key"] == "mine"  # the client's wins


THREE = {"a": upstream("a"), "b": upstream("b"), "c": upstream("c")}
SLOW = Reply(head_delay_s=5.0)


def _with_room(pool: DeploymentPool, num_requests: int) -> None:
    """More requests in the budget's window, so that it affords a second hedge."""
    for _ in range(num_requests):
        pool.budget.record_request(time.monotonic())


async def test_when_the_hedge_is_late_too_a_second_hedge_wins_and_both_others_are_cancelled() -> (
    None
):
    transport = ScriptedTransport({"a": [SLOW], "b": [SLOW], "c": [Reply()]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=HEDGE_SOON))
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "c"
    assert outcome.headers["x-hasten-hedge"] == "won:2"
    assert [pool.deployments[n].num_cancelled for n in "abc"] == [1, 1, 0]
    assert pool.num_hedges == 2 and pool.num_second_hedges == 1
    # Both losers waited past the hedge delay: each stays in the quantiles as a lower bound.
    assert [pool.deployments[n].estimate.num_samples for n in "abc"] == [1, 1, 1]
    assert _in_flight(pool) == {"a": 0, "b": 0, "c": 1}


async def test_a_first_hedge_that_answers_in_time_needs_no_second() -> None:
    hedge = dataclasses.replace(HEDGE_SOON, max_delay_ms=200.0)  # second due at ~400 ms
    transport = ScriptedTransport({"a": [SLOW], "b": [Reply()], "c": [Reply()]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=hedge))
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"
    assert transport.sent_to("c") == [] and pool.num_second_hedges == 0


async def test_the_primary_answering_after_two_hedges_cancels_both() -> None:
    quick = Reply(head_delay_s=0.15)
    transport = ScriptedTransport({"a": [quick], "b": [SLOW], "c": [SLOW]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=HEDGE_SOON))
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "a"
    assert outcome.headers["x-hasten-hedge"] == "lost:2"
    assert [pool.deployments[n].num_cancelled for n in "abc"] == [0, 1, 1]
    assert _in_flight(pool) == {"a": 1, "b": 0, "c": 0}


async def test_no_second_hedge_when_the_budget_is_spent() -> None:
    # One request in the window affords one hedge (ratio 1); a second may fill only 90%.
    late = Reply(head_delay_s=0.1)
    transport = ScriptedTransport({"a": [SLOW], "b": [late], "c": [Reply()]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=HEDGE_SOON))
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"  # a denied second leaves it as it was
    assert transport.sent_to("c") == []
    assert pool.budget.num_denied == 1 and pool.num_second_hedges == 0  # window: for good


async def test_a_hedge_the_bucket_refused_is_asked_for_again_and_sent_once_it_has_room() -> None:
    transport = ScriptedTransport({"a": [SLOW], "b": [Reply()]})
    bucket = dataclasses.replace(HEDGE_SOON, budget=0.5, budget_burst=1.0)
    dispatch, pool = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(hedge=bucket),
        deployments=PRIMARY_THEN_HEDGE,
    )
    assert pool.budget.try_spend(time.monotonic())  # the bucket's one hedge, spent
    task = asyncio.create_task(dispatch.run())
    while pool.budget.num_denied < 2:  # refused, and refused again
        await asyncio.sleep(0.005)
    assert transport.sent_to("b") == []
    _with_room(pool, 4)  # 5 requests at 50%: two hedges in all, one past the spent one
    outcome = await task
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"
    assert pool.num_hedges == 1 and pool.deployments["a"].num_cancelled == 1  # spent by hand


async def test_a_first_hedge_that_fails_is_followed_by_the_second_on_time() -> None:
    transport = ScriptedTransport({"a": [SLOW], "b": [Reply(status=503)], "c": [Reply()]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=HEDGE_SOON))
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "c"
    assert outcome.headers["x-hasten-hedge"] == "won:2"
    assert outcome.headers["x-hasten-failover"] == "b=503"
    assert len(transport.sent_to("b")) == 1  # the failed hedge is not retried meanwhile
    assert _in_flight(pool) == {"a": 0, "b": 0, "c": 1}


async def test_one_hedge_at_most_with_max_hedges_1() -> None:
    hedge = dataclasses.replace(HEDGE_SOON, max_hedges=1)
    late = Reply(head_delay_s=0.1)
    transport = ScriptedTransport({"a": [SLOW], "b": [late], "c": [Reply()]})
    dispatch, pool = _dispatch(transport, THREE, routing=RoutingConfig(hedge=hedge))
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"
    assert transport.sent_to("c") == [] and pool.budget.num_denied == 0


async def test_with_two_deployments_the_second_hedge_is_a_fresh_try_on_the_primarys() -> None:
    transport = ScriptedTransport({"a": [SLOW, Reply()], "b": [SLOW]})
    dispatch, pool = _dispatch(
        transport,
        {"a": upstream("a"), "b": upstream("b")},
        routing=RoutingConfig(hedge=HEDGE_SOON),
        deployments=PRIMARY_THEN_HEDGE,
    )
    _with_room(pool, 4)
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "a"
    assert outcome.headers["x-hasten-hedge"] == "won:2"
    assert len(transport.sent_to("a")) == 2
    assert [pool.deployments[n].num_cancelled for n in "ab"] == [1, 1]
    assert _in_flight(pool) == {"a": 1, "b": 0}


async def test_excluded_deployments_are_left_out_of_the_ranking() -> None:
    transport = ScriptedTransport({"a": [Reply()], "b": [Reply()]})
    upstreams = {"a": upstream("a"), "b": upstream("b")}
    pool = DeploymentPool(
        tuple(DeploymentConfig(upstream=n, priority=i) for i, n in enumerate(upstreams)),
        RoutingConfig(),
        random.Random(1),
    )

    def dispatch(excluded: frozenset[str]) -> Dispatch:
        return Dispatch(
            transport,
            pool,
            upstreams,
            RequestTraits(),
            legs=NativeOnly("/chat/completions", orjson.dumps(BODY), {}),
            api=CHAT_API,
            rng=random.Random(1),
            excluded=excluded,
        )

    outcome = await dispatch(frozenset({"a"})).run()
    assert isinstance(outcome, Won) and outcome.name == "b"  # a is first by priority
    outcome.ready.response.close()
    pool.on_attempt_end("b")
    with pytest.raises(UpstreamError, match="no deployment is left"):
        await dispatch(frozenset({"a", "b"})).run()


# --- upstreams at their max_in_flight ---------------------------------------------------


def _capped(name: str, max_in_flight: int) -> UpstreamConfig:
    return dataclasses.replace(upstream(name), max_in_flight=max_in_flight)


def _gates(**held: int) -> UpstreamGates:
    """Gates with ``held`` slots already taken (by other requests) on each named upstream."""
    gates = UpstreamGates()
    for name, num in held.items():
        gate = gates.gate(name, num)
        for _ in range(num):
            assert gate.try_acquire() is not None
    return gates


async def test_a_full_upstream_fails_over_at_once_without_a_failure_to_learn() -> None:
    stream = Reply(chunks=sse(delta("hi"), "[DONE]"))
    transport = ScriptedTransport({"a": [stream], "b": [stream]})
    gates = _gates(a=1)
    dispatch, pool = _dispatch(
        transport,
        {"a": _capped("a", 1), "b": upstream("b")},
        gates=gates,
        request=RequestTraits(is_stream=True),
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-failover"] == "a=busy"
    assert transport.sent_to("a") == []
    a = pool.deployments["a"]
    # Not the upstream's fault: no breaker failure, no latency sample, nothing waiting.
    assert (a.num_failures, a.num_busy, a.estimate.num_samples) == (0, 1, 0)
    assert a.breaker.state(time.monotonic()) is BreakerState.CLOSED
    assert a.waiting_since_s == [] and _in_flight(pool) == {"a": 0, "b": 1}
    assert gates.snapshot()["a"] == {"in_flight": 1, "max_in_flight": 1, "busy_refusals": 1}
    assert gates.snapshot()["b"]["in_flight"] == 1  # the winner's, until its reader closes it
    outcome.ready.response.close()
    assert gates.snapshot()["b"]["in_flight"] == 0


async def test_a_full_upstream_with_nothing_else_gives_up_busy() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    capped = dataclasses.replace(_capped("a", 2), retry=QUICK_RETRY)
    dispatch, pool = _dispatch(transport, {"a": capped}, gates=_gates(a=2))
    outcome = await dispatch.run()
    assert isinstance(outcome, GaveUp) and isinstance(outcome.last, UpstreamBusy)
    assert outcome.last.retry_after_s == 1.0
    assert outcome.headers["x-hasten-failover"] == "a=busy"  # not retried: refused at once
    assert transport.sent == [] and _in_flight(pool) == {"a": 0}


async def test_the_cap_is_shared_by_every_route_using_the_upstream() -> None:
    gates = UpstreamGates()
    stream = Reply(chunks=sse(delta("hi"), "[DONE]"))
    transport = ScriptedTransport({"a": [stream]})
    traits = RequestTraits(is_stream=True)
    # Two routes (two pools) over one upstream capped at 1.
    first, _ = _dispatch(transport, {"a": _capped("a", 1)}, gates=gates, request=traits)
    second, _ = _dispatch(transport, {"a": _capped("a", 1)}, gates=gates, request=traits)
    held = await first.run()
    assert isinstance(held, Won)
    refused = await second.run()
    assert isinstance(refused, GaveUp) and isinstance(refused.last, UpstreamBusy)
    held.ready.response.close()
    third, _ = _dispatch(transport, {"a": _capped("a", 1)}, gates=gates, request=traits)
    again = await third.run()
    assert isinstance(again, Won)
    again.ready.response.close()
    assert gates.snapshot()["a"] == {"in_flight": 0, "max_in_flight": 1, "busy_refusals": 1}


async def test_a_hedge_loser_and_the_winner_give_their_slots_back() -> None:
    gates = UpstreamGates()
    transport = ScriptedTransport(
        {"a": [Reply(head_delay_s=5.0)], "b": [Reply(chunks=sse(delta("hi"), "[DONE]"))]}
    )
    dispatch, _ = _dispatch(
        transport,
        {"a": _capped("a", 5), "b": _capped("b", 5)},
        routing=RoutingConfig(hedge=HEDGE_SOON),
        deployments=PRIMARY_THEN_HEDGE,
        request=RequestTraits(is_stream=True),
        gates=gates,
    )
    outcome = await dispatch.run()
    assert isinstance(outcome, Won) and outcome.name == "b"
    assert outcome.headers["x-hasten-hedge"] == "won"
    assert gates.snapshot()["a"]["in_flight"] == 0  # the cancelled primary's
    assert gates.snapshot()["b"]["in_flight"] == 1
    outcome.ready.response.close()
    assert {name: gate.num_in_flight for name, gate in gates.items()} == {"a": 0, "b": 0}


async def test_a_ttft_timeout_and_a_client_gone_give_the_slots_back() -> None:
    gates = UpstreamGates()
    slow = Reply(chunks=sse(delta("late")), chunk_delay_s=5.0)
    transport = ScriptedTransport({"a": [slow], "b": [Reply(head_delay_s=30.0)]})
    dispatch, _ = _dispatch(
        transport,
        {"a": _capped("a", 1), "b": _capped("b", 1)},
        routing=RoutingConfig(ttft_timeout_s=0.05),
        request=RequestTraits(is_stream=True),
        gates=gates,
    )
    task = asyncio.create_task(dispatch.run())
    while not transport.sent_to("b"):  # a timed out; b is being sent to
        await asyncio.sleep(0.01)
    assert gates.snapshot()["a"]["in_flight"] == 0
    task.cancel()  # the client left
    with pytest.raises(asyncio.CancelledError):
        await task
    assert {name: gate.num_in_flight for name, gate in gates.items()} == {"a": 0, "b": 0}

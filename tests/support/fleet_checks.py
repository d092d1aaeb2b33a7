"""Issue 13's acceptance scenarios on a running fleet, as measurements: each returns what it
counted, tests/fleet/test_replicas.py asserts on it and bench/fleet/fleet.py reports it.

Counts, never timings: upstream calls as the simulators count them, answers as the clients
read them, admissions as statuses. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from hasten.config.fleet import DEFAULT_KEY_PREFIX
from tests.support.balancer import REPLICA_HEADER
from tests.support.fleet import Fleet
from tests.support.fleet_configs import HEDGE_BUDGET, HEDGE_BURST, LIMITED_KEY
from tests.support.gateway import chat_body
from tests.support.streams import StreamAnswer, new_client, post_many, stream_chat, stream_many

SYNC_WAIT_S = 0.5  # 5 sync intervals: time for replica 1's view to reach the others
DEGRADED_TTFT_MS = 1000.0
WAIT_S = 20.0
REQUEST_TIMEOUT_S = 30.0
NUM_FOLLOWERS = 30


def reset(fleet: Fleet, **profiles: dict[str, float | int]) -> None:
    """Counters zeroed and every latency knob set, so no scenario inherits another's."""
    fleet.reset_sims()
    for name in fleet.sims:
        knobs: dict[str, float | int] = {
            "ttft_base_ms": 0.0,
            "decode_ms_per_token": 0.0,
            "output_tokens": 8,
        }
        fleet.set_sim(name, **{**knobs, **profiles.get(name, {})})


def reference_text(fleet: Fleet, sim: str, body: dict[str, Any]) -> str:
    """The uncut answer, straight from the simulator (deterministic for model + messages)."""

    async def ask() -> StreamAnswer:
        async with new_client() as client:
            return await stream_chat(client, fleet.sim_url(sim), body)

    answer = asyncio.run(ask())
    if not answer.is_complete:
        raise AssertionError(f"the simulator's own answer is incomplete: {answer}")
    return answer.text


def new_sync_client() -> httpx.Client:
    # One per scenario: a client per request would spend more time building itself than
    # the request takes.
    return httpx.Client(timeout=REQUEST_TIMEOUT_S)


def post(client: httpx.Client, url: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(url + "/v1/chat/completions", json=body)


@dataclass(frozen=True, slots=True)
class SpreadResult:
    replica_sequence: list[int]  # which replica answered each of 6 requests, in order
    first_cache: str  # x-hasten-cache of the first ask, on replica 1
    again_cache: str  # of the repeat, on replica 2
    is_same_answer: bool
    num_calls: int


def spread_and_shared_hit(fleet: Fleet) -> SpreadResult:
    """Six GETs through nginx, then one question on replica 1 and again on replica 2."""
    reset(fleet)
    body = chat_body("fleet: asked on replica 1, answered again by replica 2")
    cache = redis.Redis.from_url(fleet.redis_url)
    with new_sync_client() as client:
        sequence = [
            fleet.replica_index(client.get(fleet.url + "/healthz").headers[REPLICA_HEADER])
            for _ in range(6)
        ]
        try:
            before = _cache_keys(cache)
            first = post(client, fleet.replica_urls[0], body)
            first.raise_for_status()
            _wait_for_new_cache_key(cache, before)
        finally:
            cache.close()
        again = post(client, fleet.replica_urls[1], body)
        again.raise_for_status()
    return SpreadResult(
        replica_sequence=sequence,
        first_cache=first.headers["x-hasten-cache"],
        again_cache=again.headers["x-hasten-cache"],
        is_same_answer=again.json()["choices"] == first.json()["choices"],
        num_calls=fleet.chat_calls(),
    )


def _cache_keys(client: redis.Redis) -> set[bytes]:
    # The exact cache's keys: what the fleet features keep is under their own prefix.
    prefix = DEFAULT_KEY_PREFIX.encode()
    return {key for key in client.scan_iter(count=1000) if not key.startswith(prefix)}


def _wait_for_new_cache_key(client: redis.Redis, before: set[bytes]) -> None:
    # The L2 write happens off the request path.
    deadline = time.monotonic() + WAIT_S
    while not _cache_keys(client) - before:
        if time.monotonic() > deadline:
            raise AssertionError("the answer never reached the Redis cache")
        time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class CoalesceResult:
    num_clients: int
    num_complete: int
    num_as_reference: int  # complete and the uncut answer, character for character
    replicas_used: list[int]
    num_calls: int
    first_incomplete: StreamAnswer | None


def coalesce(fleet: Fleet, num_clients: int = 100) -> CoalesceResult:
    """``num_clients`` identical streams at once through nginx, a 1 s first token upstream."""
    reset(fleet, a={"ttft_base_ms": 1000, "decode_ms_per_token": 10, "output_tokens": 20})
    body = chat_body("fleet: one question, a hundred askers at once")
    answers = asyncio.run(stream_many(fleet.url, [body] * num_clients))
    num_calls = fleet.chat_calls()
    expected = reference_text(fleet, "a", body)
    incomplete = [a for a in answers if not a.is_complete]
    return CoalesceResult(
        num_clients=num_clients,
        num_complete=num_clients - len(incomplete),
        num_as_reference=sum(a.is_complete and a.text == expected for a in answers),
        replicas_used=sorted({fleet.replica_index(a.replica) for a in answers if a.replica}),
        num_calls=num_calls,
        first_incomplete=incomplete[0] if incomplete else None,
    )


@dataclass(frozen=True, slots=True)
class KillResult:
    is_leader_complete: bool
    num_followers: int
    num_on_live_replicas: int
    num_live_as_reference: int  # complete and the uncut answer
    num_calls: int
    first_broken: StreamAnswer | None


def kill_leader(fleet: Fleet) -> KillResult:
    """A stream on replica 1 (it leads: its call is under way), NUM_FOLLOWERS identical ones
    through nginx; once every follower has content, replica 1 is SIGKILLed."""
    reset(fleet, a={"ttft_base_ms": 200, "decode_ms_per_token": 100, "output_tokens": 30})
    body = chat_body("fleet: the leader dies mid-answer")
    leader, followers = asyncio.run(_kill_the_leader(fleet, body))
    num_calls = fleet.chat_calls()
    expected = reference_text(fleet, "a", body)
    live = [a for a in followers if a.replica and fleet.replica_index(a.replica) != 0]
    broken = [a for a in live if not a.is_complete or a.text != expected]
    return KillResult(
        is_leader_complete=leader.is_complete,
        num_followers=len(followers),
        num_on_live_replicas=len(live),
        num_live_as_reference=len(live) - len(broken),
        num_calls=num_calls,
        first_broken=broken[0] if broken else None,
    )


async def _kill_the_leader(
    fleet: Fleet, body: dict[str, Any]
) -> tuple[StreamAnswer, list[StreamAnswer]]:
    async with new_client() as client:
        leader = asyncio.create_task(stream_chat(client, fleet.replica_urls[0], body))
        deadline = time.monotonic() + WAIT_S
        while await asyncio.to_thread(fleet.chat_calls) < 1:
            if time.monotonic() > deadline or leader.done():
                raise AssertionError(f"the leader never called upstream: {leader}")
            await asyncio.sleep(0.02)
        started = [asyncio.Event() for _ in range(NUM_FOLLOWERS)]
        followers = [
            asyncio.create_task(stream_chat(client, fleet.url, body, first_content=event))
            for event in started
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), WAIT_S)
        except TimeoutError:
            num = sum(e.is_set() for e in started)
            raise AssertionError(f"only {num} of {NUM_FOLLOWERS} followers got content") from None
        await asyncio.to_thread(fleet.kill_replica, 0)
        return await leader, list(await asyncio.gather(*followers))


@dataclass(frozen=True, slots=True)
class RoutingResult:
    preferred_before: dict[int, str]  # per replica: who answered most of its warm-up
    first_tried_degraded: list[bool]  # per request of replica 1's 10: was b tried?
    num_after: int  # requests to replicas 2 and 3 after replica 1 learned
    num_after_to_degraded: int  # of those, how many were sent to b


def degraded_routing(fleet: Fleet) -> RoutingResult:
    """b starts as the faster deployment, so every replica prefers it; then it degrades.
    Of the 20 requests after that, replica 1 gets the first 10 (and learns), replicas 2 and
    3 the next 10."""
    # A gap the machine's noise cannot close: 150 ms against none.
    reset(fleet, a={"ttft_base_ms": 150}, b={"ttft_base_ms": 0})
    answered: dict[int, Counter[str]] = defaultdict(Counter)
    tried = []
    with new_sync_client() as client:
        for i in range(30):  # 10 a replica: a loaded machine once tipped one of 5 to a
            body = chat_body(f"fleet routed warm-up {i}", model="routed")
            response = post(client, fleet.url, body)
            response.raise_for_status()
            index = fleet.replica_index(response.headers[REPLICA_HEADER])
            answered[index][response.headers["x-hasten-upstream"]] += 1
        # What each replica prefers: the deployment most of its warm-up went to (one request
        # on a loaded machine may still go elsewhere while the estimates settle).
        preferred = {index: counts.most_common(1)[0][0] for index, counts in answered.items()}
        fleet.set_sim("b", ttft_base_ms=DEGRADED_TTFT_MS)
        for i in range(10):
            b_before = fleet.chat_calls("b")
            body = chat_body(f"fleet routed learn {i}", model="routed")
            post(client, fleet.replica_urls[0], body).raise_for_status()
            tried.append(fleet.chat_calls("b") > b_before)  # b timed out, a answered
        time.sleep(SYNC_WAIT_S)
        b_before = fleet.chat_calls("b")
        for i, url in zip(range(10), itertools.cycle(fleet.replica_urls[1:]), strict=False):
            body = chat_body(f"fleet routed elsewhere {i}", model="routed")
            post(client, url, body).raise_for_status()
    return RoutingResult(
        preferred_before=dict(sorted(preferred.items())),
        first_tried_degraded=tried,
        num_after=10,
        num_after_to_degraded=fleet.chat_calls("b") - b_before,
    )


@dataclass(frozen=True, slots=True)
class HedgeResult:
    num_requests: int
    statuses: dict[int, int]
    num_hedged: int  # answers whose x-hasten-hedge says a hedge was sent
    num_extra: int  # upstream requests beyond one per client request
    num_allowed: float  # the fleet's budget: ratio x requests + burst

    @property
    def extra_ratio(self) -> float:
        return self.num_extra / self.num_requests


def hedge_budget(fleet: Fleet, num_requests: int = 60) -> HedgeResult:
    """Every request wants a hedge (first token after 300 ms, hedge delay fixed at 20 ms),
    so the budget alone decides. A token bucket allows ratio x requests + burst hedges;
    three replicas with a bucket each would allow three bursts."""
    reset(fleet, a={"ttft_base_ms": 300}, b={"ttft_base_ms": 300})
    bodies = [
        chat_body(f"fleet hedged {i}", model="hedged", temperature=0.7) for i in range(num_requests)
    ]
    responses = asyncio.run(post_many(fleet.url, bodies, concurrency=15))
    return HedgeResult(
        num_requests=num_requests,
        statuses=dict(Counter(r.status_code for r in responses)),
        num_hedged=sum(r.headers.get("x-hasten-hedge") in ("won", "lost") for r in responses),
        num_extra=fleet.chat_calls() - num_requests,
        num_allowed=HEDGE_BUDGET * num_requests + HEDGE_BURST,
    )


@dataclass(frozen=True, slots=True)
class LimitResult:
    num_requests: int
    statuses: dict[int, int]
    num_limited_without_retry_after: int

    @property
    def num_admitted(self) -> int:
        return self.statuses.get(200, 0)


def rate_limit(fleet: Fleet, num_requests: int = 300) -> LimitResult:
    """``num_requests`` distinct requests with the limited key through nginx (a third per
    replica), 12 at a time: well within the minute."""
    bodies = [chat_body(f"fleet limited {i}", temperature=0.7) for i in range(num_requests)]
    auth = {"authorization": f"Bearer {LIMITED_KEY}"}
    responses = asyncio.run(post_many(fleet.url, bodies, headers=auth, concurrency=12))
    return LimitResult(
        num_requests=num_requests,
        statuses=dict(Counter(r.status_code for r in responses)),
        num_limited_without_retry_after=sum(
            r.status_code == 429 and "retry-after" not in r.headers for r in responses
        ),
    )


@dataclass(frozen=True, slots=True)
class RedisLossResult:
    statuses: list[int]
    replicas_used: list[int]
    cache_states: list[str]  # x-hasten-cache of each answer


def redis_loss(fleet: Fleet, num_requests: int = 6) -> RedisLossResult:
    """Redis stops; then ``num_requests`` cacheable questions go through nginx (which skips
    a replica that is down)."""
    reset(fleet)
    fleet.stop_redis()
    with new_sync_client() as client:
        responses = [
            post(client, fleet.url, chat_body(f"fleet without Redis {i}"))
            for i in range(num_requests)
        ]
    return RedisLossResult(
        statuses=[r.status_code for r in responses],
        replicas_used=sorted({fleet.replica_index(r.headers[REPLICA_HEADER]) for r in responses}),
        cache_states=[r.headers.get("x-hasten-cache", "") for r in responses],
    )

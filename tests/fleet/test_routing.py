"""RoutingSync against a real redis-server, one tick at a time (``sync_once``), no gateway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace

import pytest

from hasten.config.fleet import FleetConfig
from hasten.config.routing import HedgeConfig, RoutingConfig
from hasten.fleet.link import FleetLink
from hasten.fleet.routing import RoutingSync
from hasten.routing.breaker import BreakerState
from hasten.routing.pool import DeploymentPool
from tests.support.routing import BREAKER, make_pool
from tests.support.servers import free_port, redis_server

# Cooldowns long enough that no trip ends while a test looks at it.
LONG_BREAKER = replace(BREAKER, cooldown_s=30.0, max_cooldown_s=60.0)
ROUTING = RoutingConfig(
    breaker=LONG_BREAKER, hedge=HedgeConfig(is_enabled=True, budget=0.1, budget_burst=0.0)
)


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


Replica = tuple[RoutingSync, DeploymentPool]


@pytest.fixture
async def make_replica(redis_url: str) -> AsyncIterator[Callable[..., Replica]]:
    links: list[FleetLink] = []

    def make(clock: Callable[[], float] = time.monotonic, url: str = redis_url) -> Replica:
        link = FleetLink(FleetConfig(redis_url=url, retry_backoff_s=0.01))
        links.append(link)
        pool = make_pool(routing=ROUTING)
        return RoutingSync(link, {"m": pool}, clock=clock), pool

    yield make
    for link in links:
        await link.aclose()


def trip(pool: DeploymentPool, name: str, now_s: float) -> None:
    for _ in range(LONG_BREAKER.max_consecutive_failures):
        pool.on_failure(name, now_s, is_probe=False, reason="500")


async def test_what_one_replica_learns_another_folds_in_once(
    make_replica: Callable[..., Replica],
) -> None:
    (sync_a, pool_a), (sync_b, pool_b) = make_replica(), make_replica()
    assert await sync_b.sync_once()  # B starts first: reads only what comes after
    now_s = time.monotonic()
    for _ in range(4):
        pool_a.on_first_token("c", 400.0, now_s, is_probe=False)
    assert await sync_a.sync_once()
    assert await sync_b.sync_once()
    assert pool_b.deployments["c"].estimate.num_samples == 4
    assert sync_b.snapshot()["remote_entries"] == 1 and sync_b.num_replicas == 2
    # Neither replica counts anything twice: B has nothing of its own to publish, and A
    # skips its own entry.
    assert await sync_b.sync_once() and await sync_a.sync_once()
    assert pool_a.deployments["c"].estimate.num_samples == 4
    assert pool_b.deployments["c"].estimate.num_samples == 4
    assert sync_a.snapshot()["remote_entries"] == 0


async def test_a_trip_crosses_replicas_whose_monotonic_clocks_differ(
    make_replica: Callable[..., Replica],
) -> None:
    skew_s = 5000.0  # B's monotonic clock is far from A's: only Redis's clock is shared

    def b_clock() -> float:
        return time.monotonic() + skew_s

    (sync_a, pool_a), (sync_b, pool_b) = make_replica(), make_replica(b_clock)
    assert await sync_a.sync_once() and await sync_b.sync_once()
    trip(pool_a, "b", time.monotonic())
    reopen_a_s = pool_a.deployments["b"].breaker.reopen_at_s
    assert await sync_a.sync_once() and await sync_b.sync_once()
    breaker_b = pool_b.deployments["b"].breaker
    assert breaker_b.state(b_clock()) is BreakerState.OPEN
    # The same moment on B's clock, give or take the round trips' halves.
    assert abs(breaker_b.reopen_at_s - (reopen_a_s + skew_s)) < 0.25
    assert sync_b.snapshot()["remote_trips"] == 1


async def test_a_replica_starting_later_reads_the_trip_from_its_key(
    make_replica: Callable[..., Replica],
) -> None:
    sync_a, pool_a = make_replica()
    assert await sync_a.sync_once()
    trip(pool_a, "b", time.monotonic())
    assert await sync_a.sync_once()
    sync_late, pool_late = make_replica()
    assert await sync_late.sync_once()
    breaker = pool_late.deployments["b"].breaker
    assert breaker.state(time.monotonic()) is BreakerState.OPEN
    assert abs(breaker.reopen_at_s - pool_a.deployments["b"].breaker.reopen_at_s) < 0.25


async def test_the_hedge_budget_counts_the_fleets_requests(
    make_replica: Callable[..., Replica],
) -> None:
    (sync_a, pool_a), (sync_b, pool_b) = make_replica(), make_replica()
    now_s = time.monotonic()
    for _ in range(100):
        pool_a.on_request(now_s)
    assert await sync_a.sync_once() and await sync_b.sync_once()
    snapshot = pool_b.budget.snapshot(time.monotonic())["fleet"]
    assert snapshot == {
        "window_requests": 100,
        "window_hedges": 0,
        "replicas": 2,
        "unsynced_requests": 0,
        "unsynced_hedges": 0,
    }
    # B has served nothing itself, yet may hedge from its half of the fleet's headroom.
    granted = sum(pool_b.try_hedge(time.monotonic()) for _ in range(10))
    assert granted == 5


async def test_redis_away_means_local_state_and_the_news_waits_for_its_return(
    make_replica: Callable[..., Replica],
) -> None:
    port = free_port()
    with redis_server(port=port) as url:
        sync_a, pool_a = make_replica(url=url)
        sync_b, pool_b = make_replica(url=url)
        assert await sync_a.sync_once() and await sync_b.sync_once()
    trip(pool_a, "b", time.monotonic())  # while Redis is away
    assert not await sync_a.sync_once()
    assert pool_a.budget.snapshot(time.monotonic())["fleet"] is None
    assert sync_a.num_failures >= 1
    with redis_server(port=port):
        for _ in range(50):  # the link's backoff is 10 ms here
            if await sync_a.sync_once():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("no sync after Redis came back")
        for _ in range(50):
            if await sync_b.sync_once():
                break
            await asyncio.sleep(0.02)
        assert pool_b.deployments["b"].breaker.state(time.monotonic()) is BreakerState.OPEN


async def test_a_malformed_entry_is_skipped(make_replica: Callable[..., Replica]) -> None:
    sync_a, pool_a = make_replica()
    assert await sync_a.sync_once()
    key = sync_a._link.key("routing", "news")
    await sync_a._link.client.xadd(key, {"r": "stranger", "p": b"{not json"})
    await sync_a._link.client.xadd(key, {"r": "stranger", "p": b'{"m": {"o": [["a", "t"]]}}'})
    assert await sync_a.sync_once()
    assert sync_a.snapshot()["malformed_entries"] == 2
    assert pool_a.deployments["a"].estimate.num_samples == 0

"""Issue 13's acceptance checks: 3 real ``hasten serve`` replicas behind Debian's nginx
(round robin, loopback), one redis-server shared through ``[fleet]``, simulators upstream.

The scenarios live in tests/support/fleet_checks.py (bench/fleet/fleet.py reports the same ones);
here each is held to its rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fleet_checks as checks
from tests.support import fleet_configs as configs
from tests.support.fleet import Fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with configs.shared_fleet(tmp_path_factory.mktemp("fleet")) as running:
        yield running


def test_nginx_spreads_round_robin_and_a_repeat_hits_the_shared_cache_on_another_replica(
    fleet: Fleet,
) -> None:
    result = checks.spread_and_shared_hit(fleet)
    sequence = result.replica_sequence
    assert sorted(sequence[:3]) == [0, 1, 2] and sequence[3:] == sequence[:3], sequence
    assert (result.first_cache, result.again_cache) == ("miss", "hit")
    assert result.is_same_answer
    assert result.num_calls == 1


def test_100_identical_streams_through_nginx_make_one_upstream_call(fleet: Fleet) -> None:
    """Needs i13-coalesce: without it each replica coalesces on its own (3 calls)."""
    result = checks.coalesce(fleet, num_clients=100)
    assert result.first_incomplete is None, result.first_incomplete
    assert result.replicas_used == [0, 1, 2]
    assert result.num_as_reference == 100
    assert result.num_calls == 1, f"{result.num_calls} upstream calls for 100 identical requests"


def test_a_deployment_degraded_behind_replica_1_is_avoided_by_replicas_2_and_3(
    fleet: Fleet,
) -> None:
    """Needs i13-routing: without it replicas 2 and 3 each learn b's slowness themselves."""
    result = checks.degraded_routing(fleet)
    assert result.preferred_before == {0: "b", 1: "b", 2: "b"}, "b was not the faster one"
    tried = result.first_tried_degraded
    assert any(tried) and not any(tried[-3:]), f"replica 1 tried b: {tried}"
    assert result.num_after_to_degraded == 0, (
        f"replicas 2 and 3 sent {result.num_after_to_degraded} of {result.num_after} requests"
        " to the deployment replica 1 had found degraded"
    )


def test_the_hedge_budget_holds_for_the_fleet_not_per_replica(fleet: Fleet) -> None:
    """Needs i13-routing (the shared hedge budget): three buckets allow three bursts."""
    result = checks.hedge_budget(fleet, num_requests=60)
    assert result.statuses == {200: 60}
    assert result.num_hedged > 0, "nothing was hedged: the check would prove nothing"
    assert result.num_extra <= result.num_allowed, (
        f"{result.num_extra} extra upstream requests for {result.num_requests}:"
        f" over the fleet's budget of {result.num_allowed:g}"
    )


def test_a_killed_leader_and_then_a_lost_redis_leave_no_client_of_a_live_replica_unanswered(
    tmp_path: Path,
) -> None:
    """The kill needs i13-coalesce: without it replicas 2 and 3 call upstream themselves
    (3 calls). Redis lost after it holds today: each replica carries on alone."""
    with configs.single_sim_fleet(tmp_path) as fleet:
        killed = checks.kill_leader(fleet)
        without_redis = checks.redis_loss(fleet, num_requests=6)
    assert without_redis.statuses == [200] * 6
    assert without_redis.replicas_used == [1, 2]  # nginx skips the dead replica
    assert set(without_redis.cache_states) == {"miss"}
    assert not killed.is_leader_complete, "the leader finished before it was killed"
    assert killed.num_on_live_replicas >= 10, killed
    assert killed.first_broken is None, (
        f"{killed.num_on_live_replicas - killed.num_live_as_reference} clients of live"
        f" replicas lost their answer, first: {killed.first_broken}"
    )
    assert killed.num_calls <= 2, (
        f"{killed.num_calls} upstream calls, expected the leader's and at most one takeover"
    )


def test_a_key_limited_to_100_requests_a_minute_gets_100_across_3_replicas(
    tmp_path: Path,
) -> None:
    """Needs i13-keys (``requests_per_minute`` on a static key: until then the replicas
    refuse the config) and i13-limits (exact counts through Redis: until then 300 pass)."""
    with configs.limited_fleet(tmp_path) as fleet:
        result = checks.rate_limit(fleet, num_requests=300)
    assert set(result.statuses) <= {200, 429}, result.statuses
    assert abs(result.num_admitted - configs.REQUESTS_PER_MINUTE) <= 1, (
        f"admitted {result.num_admitted} of {result.num_requests}"
    )
    assert result.num_limited_without_retry_after == 0

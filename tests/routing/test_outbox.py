"""Unit tests for sharing routing state: a pool's export, and folding another's in (pure)."""

from __future__ import annotations

from hasten.config.routing import RoutingConfig
from hasten.routing.breaker import BreakerState
from hasten.routing.outbox import (
    MAX_PENDING,
    Observation,
    ObservationKind,
    Outbox,
    Summary,
    Trip,
)
from hasten.routing.pool import DeploymentPool
from tests.support.routing import BREAKER, make_pool, teach


def sharing_pool(seed: int = 1) -> tuple[DeploymentPool, list[int]]:
    """A pool with an outbox; the list counts the outbox's trip calls."""
    wakes: list[int] = []
    pool = make_pool(routing=RoutingConfig(breaker=BREAKER), seed=seed)
    pool.outbox = Outbox(lambda: wakes.append(1))
    return pool, wakes


def export(pool: DeploymentPool) -> Summary:
    assert pool.outbox is not None
    return pool.outbox.drain()


def primaries(pool: DeploymentPool, now_s: float, num: int = 200) -> set[str]:
    return {pool.rank(now_s).order[0] for _ in range(num)}


def test_export_holds_the_pools_own_observations_once() -> None:
    pool, _ = sharing_pool()
    now_s = teach(pool, "a", 20.0, 3, 0.0)
    pool.on_attempt_start("b", now_s)
    pool.on_cancelled("b", 400.0, now_s, is_probe=False)
    pool.on_stream_end("a", now_s, tpot_ms=5.0, error="")
    summary = export(pool)
    kinds = [(o.deployment, o.kind) for o in summary.observations]
    assert kinds == [("a", ObservationKind.TTFT)] * 3 + [
        ("b", ObservationKind.CENSORED),
        ("a", ObservationKind.TPOT),
    ]
    assert summary.observations[-1].value_ms == 5.0 and not summary.trips
    assert export(pool).is_empty  # drained


def test_a_degraded_deployment_learnt_elsewhere_is_avoided_here() -> None:
    teacher, _ = sharing_pool()
    now_s = teach(teacher, "a", 20.0, 4, 0.0)
    now_s = teach(teacher, "b", 22.0, 4, now_s)
    now_s = teach(teacher, "c", 400.0, 4, now_s)
    learner = make_pool(seed=2)
    assert primaries(learner, now_s) == {"a", "b", "c"}  # knows nothing yet: P2C over all
    learner.merge_remote(export(teacher), now_s)
    assert "c" not in primaries(learner, now_s)
    assert learner.num_remote_observations == 12
    slow = learner.deployments["c"].estimate
    assert slow.typical_ttft_ms is not None and slow.typical_ttft_ms > 300.0


def test_what_was_merged_is_never_exported_again() -> None:
    teacher, _ = sharing_pool()
    now_s = teach(teacher, "c", 400.0, 4, 0.0)
    learner, _ = sharing_pool(seed=2)
    learner.merge_remote(export(teacher), now_s)
    assert export(learner).is_empty
    assert learner.deployments["c"].num_wins == 0  # nor counted as this replica's own


def test_a_local_trip_is_exported_and_wakes_the_sync() -> None:
    pool, wakes = sharing_pool()
    for i in range(BREAKER.max_consecutive_failures):
        pool.on_failure("b", 1.0 + i * 0.01, is_probe=False, reason="500")
    assert wakes == [1]
    (trip,) = export(pool).trips
    assert trip.deployment == "b" and trip.num_trips == 1
    assert trip.reopen_at_s == pool.deployments["b"].breaker.reopen_at_s
    assert trip.reason == "3 consecutive failures (500)"


def test_a_remote_trip_opens_the_local_breaker_until_its_reopen_time() -> None:
    pool = make_pool(routing=RoutingConfig(breaker=BREAKER))
    summary = Summary(trips=(Trip("b", 5.0, 2, "3 consecutive failures (500)"),))
    assert pool.merge_remote(summary, 1.0) == 1
    breaker = pool.deployments["b"].breaker
    assert breaker.state(4.9) is BreakerState.OPEN
    assert "b" not in primaries(pool, 2.0)
    assert pool.rank(2.0).order[-1] == "b"  # still tried last, as any tripped deployment
    assert breaker.state(5.0) is BreakerState.HALF_OPEN
    assert breaker.num_trips == 2 and breaker.num_remote_trips == 1
    assert breaker.num_consecutive_failures == 0  # no failure of its own
    assert breaker.snapshot(2.0)["last_trip_reason"] == "fleet: 3 consecutive failures (500)"


def test_a_failed_probe_after_a_remote_trip_backs_off_as_the_tripper_would() -> None:
    pool = make_pool(routing=RoutingConfig(breaker=BREAKER))
    pool.merge_remote(Summary(trips=(Trip("b", 2.0, 2, "x"),)), 1.0)
    pool.on_attempt_start("b", 2.5)
    pool.on_failure("b", 2.5, is_probe=True, reason="500")
    # Two trips in a row already: the third cools down for 4 x cooldown_s.
    assert pool.deployments["b"].breaker.reopen_at_s == 2.5 + 4 * BREAKER.cooldown_s


def test_stale_or_shorter_remote_trips_change_nothing() -> None:
    pool = make_pool(routing=RoutingConfig(breaker=BREAKER))
    assert pool.merge_remote(Summary(trips=(Trip("b", 1.0, 1, "old"),)), 2.0) == 0
    assert pool.deployments["b"].breaker.state(2.0) is BreakerState.CLOSED
    pool.merge_remote(Summary(trips=(Trip("b", 9.0, 1, "long"),)), 2.0)
    assert pool.merge_remote(Summary(trips=(Trip("b", 4.0, 1, "short"),)), 2.0) == 0
    assert pool.deployments["b"].breaker.reopen_at_s == 9.0


def test_unknown_deployments_are_skipped_and_future_times_clamped() -> None:
    pool = make_pool()
    summary = Summary(
        observations=(
            Observation("zz", ObservationKind.TTFT, 10.0, 1.0),
            Observation("a", ObservationKind.TTFT, 10.0, 50.0),
        ),
        trips=(Trip("zz", 9.0, 1, "x"),),
    )
    assert pool.merge_remote(summary, 2.0) == 0
    assert pool.num_remote_observations == 1
    assert pool.deployments["a"].estimate.updated_s == 2.0


def test_an_older_remote_sample_does_not_move_the_estimates_clock_back() -> None:
    pool = make_pool()
    teach(pool, "a", 20.0, 1, 9.95)  # at 10.0
    pool.merge_remote(Summary((Observation("a", ObservationKind.TTFT, 30.0, 8.0),)), 10.0)
    assert pool.deployments["a"].estimate.updated_s == 10.0
    assert pool.deployments["a"].estimate.num_samples == 2


def test_shifted_moves_every_time() -> None:
    summary = Summary(
        (Observation("a", ObservationKind.TTFT, 10.0, 1.0),), (Trip("b", 3.0, 1, "x"),)
    )
    moved = summary.shifted(100.0)
    assert moved.observations[0].at_s == 101.0 and moved.trips[0].reopen_at_s == 103.0
    assert moved.shifted(-100.0) == summary


def test_the_outbox_keeps_the_newest_observations_and_the_latest_trip() -> None:
    outbox = Outbox()
    for i in range(MAX_PENDING + 5):
        outbox.observe("a", ObservationKind.TTFT, float(i), 0.0)
    outbox.trip(Trip("b", 1.0, 1, "first"))
    outbox.trip(Trip("b", 2.0, 2, "second"))
    summary = outbox.drain()
    assert len(summary.observations) == MAX_PENDING and outbox.num_dropped == 5
    assert summary.observations[0].value_ms == 5.0
    assert summary.trips == (Trip("b", 2.0, 2, "second"),)


def test_restore_puts_unsent_news_back_before_newer_news() -> None:
    outbox = Outbox()
    outbox.observe("a", ObservationKind.TTFT, 1.0, 0.0)
    outbox.trip(Trip("b", 1.0, 1, "old"))
    unsent = outbox.drain()
    outbox.observe("a", ObservationKind.TTFT, 2.0, 0.0)
    outbox.trip(Trip("b", 2.0, 2, "new"))
    outbox.restore(unsent)
    summary = outbox.drain()
    assert [o.value_ms for o in summary.observations] == [1.0, 2.0]
    assert summary.trips == (Trip("b", 2.0, 2, "new"),)


def test_remote_censored_waits_past_the_hedge_delay_are_tail_samples() -> None:
    pool = make_pool()
    delay_ms = pool.hedge_delay_s("a") * 1000.0
    summary = Summary(
        (
            Observation("b", ObservationKind.CENSORED, delay_ms + 1.0, 1.0),
            Observation("c", ObservationKind.CENSORED, delay_ms / 2, 1.0),
        )
    )
    pool.merge_remote(summary, 1.0)
    assert pool.deployments["b"].estimate.recent_samples() == [delay_ms + 1.0]
    assert pool.deployments["c"].estimate.recent_samples() == []  # evidence only
    assert pool.deployments["c"].estimate.slowness_ms(1.0) == 0.0  # one sample: no second

"""The Lua scripts against the pure model, on a real redis-server: same steps, same verdicts."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.limits import ledger
from hasten.limits.shared_ledger import SharedLedger

LEASE_MS = 4000.0
T0_MS = 1_700_000_000_000.0


@dataclass(frozen=True)
class Admit:
    gap_ms: float
    num_tokens: int
    reserve_usd: float = 0.0


@dataclass(frozen=True)
class Settle:
    which: int  # an earlier admission, modulo their number
    token_delta: int
    cost_usd: float


@dataclass(frozen=True)
class Renew:
    which: int


_ops = st.lists(
    st.one_of(
        st.builds(
            Admit,
            st.sampled_from([0.0, 0.5, 1.0, 250.0, 999.5, 3000.0, 20_000.0, 61_000.0]),
            st.integers(min_value=1, max_value=300),
            st.sampled_from([0.0, 0.1, 0.3, 1.0 / 3.0, 0.7]),
        ),
        st.builds(
            Settle,
            st.integers(min_value=0, max_value=50),
            # Far over a reservation too: the bucket is owed at most one window.
            st.integers(min_value=-300, max_value=300) | st.integers(1000, 50_000),
            st.sampled_from([0.0, 0.001, 0.25, 1.0 / 3.0]),
        ),
        st.builds(Renew, st.integers(min_value=0, max_value=50)),
    ),
    min_size=1,
    max_size=40,
)
_limits = st.builds(
    KeyLimits,
    requests_per_minute=st.none() | st.integers(min_value=0, max_value=8),
    tokens_per_minute=st.none() | st.integers(min_value=0, max_value=900),
    max_concurrent=st.none() | st.integers(min_value=0, max_value=3),
    budget_usd=st.none() | st.sampled_from([0.0, 0.5, 1.0]),
    budget_period_s=st.sampled_from([10.0, 3600.0]),
)


def _same(model: ledger.Verdict, redis: ledger.Verdict) -> None:
    assert (model.is_allowed, model.denied_by) == (redis.is_allowed, redis.denied_by)
    assert (model.requests_remaining, model.tokens_remaining) == (
        redis.requests_remaining,
        redis.tokens_remaining,
    )
    for name in ("retry_after_ms", "requests_reset_ms", "tokens_reset_ms"):
        assert getattr(model, name) == pytest.approx(getattr(redis, name), abs=1e-6), name


async def _run(url: str, limits: KeyLimits, ops: list[Admit | Settle | Renew]) -> None:
    link = FleetLink(FleetConfig(redis_url=url, op_timeout_s=2.0, connect_timeout_s=2.0))
    shared = SharedLedger(link)
    key_id = uuid.uuid4().hex
    book = ledger.KeyLedger()
    now_ms = T0_MS
    admitted: list[str] = []
    try:
        for i, op in enumerate(ops):
            if isinstance(op, Admit):
                now_ms += op.gap_ms
                request = f"r{i}"
                model = ledger.admit(
                    book, limits, now_ms, request, op.num_tokens, LEASE_MS, op.reserve_usd
                )
                redis = await shared.admit(
                    key_id,
                    limits,
                    request,
                    op.num_tokens,
                    LEASE_MS,
                    now_ms=now_ms,
                    reserve_usd=op.reserve_usd,
                )
                _same(model, redis)
                if model.is_allowed:
                    admitted.append(request)
            elif admitted and isinstance(op, Settle):
                request = admitted[op.which % len(admitted)]
                ledger.settle(book, limits, now_ms, request, op.token_delta, op.cost_usd)
                await shared.settle(
                    key_id, limits, request, op.token_delta, op.cost_usd, now_ms=now_ms
                )
            elif admitted and isinstance(op, Renew):
                request = admitted[op.which % len(admitted)]
                ledger.renew(book, request, now_ms + LEASE_MS)
                await shared.renew([(key_id, request)], LEASE_MS, now_ms=now_ms)
    finally:
        await link.aclose()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(limits=_limits, ops=_ops)
def test_the_scripts_decide_as_the_model(
    redis_url: str, limits: KeyLimits, ops: list[Admit | Settle | Renew]
) -> None:
    asyncio.run(_run(redis_url, limits, ops))


def test_redis_clock_admits_and_counts(redis_url: str) -> None:
    async def run() -> list[ledger.Verdict]:
        link = FleetLink(FleetConfig(redis_url=redis_url))
        shared = SharedLedger(link)
        limits = KeyLimits(requests_per_minute=2, tokens_per_minute=100)
        try:
            return [await shared.admit("clock", limits, f"r{i}", 10, LEASE_MS) for i in range(3)]
        finally:
            await link.aclose()

    verdicts = asyncio.run(run())
    assert [v.is_allowed for v in verdicts] == [True, True, False]
    assert verdicts[1].requests_remaining == 0 and verdicts[1].tokens_remaining == 80
    assert 59_000 < verdicts[2].retry_after_ms <= 60_000


def test_a_dead_replicas_slots_lapse_in_redis(redis_url: str) -> None:
    """A replica that admitted and died never settles: its slot ends with its lease."""

    async def run() -> list[bool]:
        link = FleetLink(FleetConfig(redis_url=redis_url))
        shared = SharedLedger(link)
        limits, key_id = KeyLimits(max_concurrent=1), uuid.uuid4().hex
        try:
            steps = [(0.0, "dead"), (LEASE_MS - 1, "early"), (LEASE_MS, "after")]
            return [
                (await shared.admit(key_id, limits, r, 1, LEASE_MS, now_ms=T0_MS + t)).is_allowed
                for t, r in steps
            ]
        finally:
            await link.aclose()

    assert asyncio.run(run()) == [True, False, True]


def test_a_dead_replicas_budget_reservations_lapse_in_redis(redis_url: str) -> None:
    """A replica that reserved part of a budget and died never settles: the reservation
    ends with its lease, and a live one's is renewed past it."""

    async def run() -> list[str | None]:
        link = FleetLink(FleetConfig(redis_url=redis_url))
        shared = SharedLedger(link)
        limits, key_id = KeyLimits(budget_usd=1.0), uuid.uuid4().hex
        try:
            steps = [(0.0, "dead", 0.7), (1.0, "live", 0.3), (LEASE_MS - 1, "early", 0.2)]
            verdicts = [
                await shared.admit(
                    key_id, limits, r, 1, LEASE_MS, now_ms=T0_MS + t, reserve_usd=usd
                )
                for t, r, usd in steps
            ]
            await shared.renew([(key_id, "live")], LEASE_MS, now_ms=T0_MS + LEASE_MS - 1)
            # "dead" lapsed; "live" (renewed) still holds 0.3: 0.3 < 1.0 admits.
            verdicts.append(
                await shared.admit(
                    key_id, limits, "after", 1, LEASE_MS, now_ms=T0_MS + LEASE_MS, reserve_usd=0.8
                )
            )
            # Now 0.3 + 0.8 are reserved: the next waits for one of them.
            verdicts.append(
                await shared.admit(key_id, limits, "more", 1, LEASE_MS, now_ms=T0_MS + LEASE_MS)
            )
            return [v.denied_by for v in verdicts]
        finally:
            await link.aclose()

    assert asyncio.run(run()) == [None, None, "budget_reserved", None, "budget_reserved"]

"""Pre-admitted requests and the bookkeeping round trips, against a real redis-server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pytest
import redis.asyncio as aioredis

from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.limits.headers import rate_header_pairs
from hasten.limits.limiter import Limiter
from hasten.limits.shared_ledger import FollowUp
from hasten.limits.tickets import MAX_TICKETS, Admission, TicketBook, num_tickets_for
from tests.support.servers import redis_server

RPM = KeyLimits(requests_per_minute=20)  # one ticket a replica: 5% of 20
BUSY = KeyLimits(requests_per_minute=1000)  # the most tickets


def _answered(limiter: Limiter, key_id: str, limits: KeyLimits, admission: Admission) -> None:
    limiter.finish(key_id, limits, admission, 0, None)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
async def limiters(redis_url: str) -> AsyncIterator[list[Limiter]]:
    links = [FleetLink(FleetConfig(redis_url=redis_url)) for _ in range(3)]
    made = [Limiter(link) for link in links]
    yield made
    for limiter, link in zip(made, links, strict=True):
        await limiter.aclose()
        await link.aclose()


async def _window(limiter: Limiter, key_id: str) -> dict[str, float]:
    assert limiter.shared is not None
    key = limiter.shared.keys(key_id)[0]
    probe = limiter.shared.link.client
    entries = cast(list[tuple[bytes, float]], await probe.zrange(key, 0, -1, withscores=True))
    return {member.decode(): float(score) for member, score in entries}


async def _settled(book: TicketBook, size: int) -> None:
    for _ in range(200):
        if len(book) == size:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(book)} tickets held, expected {size}")


def test_idle_tickets_hold_back_at_most_a_twentieth_of_a_limit() -> None:
    assert num_tickets_for(BUSY) == MAX_TICKETS
    assert num_tickets_for(RPM) == 1  # at least one
    assert num_tickets_for(KeyLimits(requests_per_minute=100)) == 5
    # A budget is checked against each request's own reservation: no ticket stands in.
    assert num_tickets_for(KeyLimits(budget_usd=1.0)) == 0
    assert num_tickets_for(KeyLimits(requests_per_minute=1000, budget_usd=1.0)) == 0
    # An idle ticket's slot is one another replica cannot use: none below 20 at once.
    assert num_tickets_for(KeyLimits(requests_per_minute=1000, max_concurrent=19)) == 0
    assert num_tickets_for(KeyLimits(max_concurrent=40)) == 2
    # Tokens: 5% of 4000 is one block of 200.
    assert num_tickets_for(KeyLimits(tokens_per_minute=4000), 200) == 1
    assert num_tickets_for(KeyLimits(tokens_per_minute=1_000_000), 200) == MAX_TICKETS
    assert num_tickets_for(KeyLimits()) == 0


async def test_the_next_request_takes_the_ticket_with_no_redis_call(
    limiters: list[Limiter],
) -> None:
    limiter, key_id = limiters[0], uuid.uuid4().hex
    assert limiter.shared is not None and limiter.tickets is not None
    calls: list[str] = []
    admit, follow_up = limiter.shared.admit, limiter.shared.follow_up

    async def counted_admit(*args: object, **kwargs: object) -> object:
        calls.append(str(args[2]))
        return await admit(*args, **kwargs)  # type: ignore[arg-type]

    async def counted_follow_up(*args: object, **kwargs: object) -> object:
        calls.append(f"follow-up {len(cast(FollowUp, args[2]).grants)}")
        return await follow_up(*args, **kwargs)  # type: ignore[arg-type]

    limiter.shared.admit = counted_admit  # type: ignore[assignment,method-assign]
    limiter.shared.follow_up = counted_follow_up  # type: ignore[assignment,method-assign]
    first = await limiter.reserve(key_id, BUSY, "r1", 0)
    assert first.verdict.is_allowed and calls == ["r1"]
    await asyncio.sleep(0.05)
    assert len(calls) == 1  # nothing is asked while the request is being answered
    _answered(limiter, key_id, BUSY, first)
    await _settled(limiter.tickets, MAX_TICKETS)
    assert calls == ["r1", f"follow-up {MAX_TICKETS}"]  # every ticket in one round trip
    for i in range(MAX_TICKETS // 2):
        admission = await limiter.reserve(key_id, BUSY, f"r{i + 2}", 0)
        # Nothing ran between the call and here: the answer came from a ticket.
        assert admission.verdict.is_allowed and admission.is_shared
        assert admission.admission_id.startswith("t-")
        _answered(limiter, key_id, BUSY, admission)
    assert limiter.tickets.num_taken == MAX_TICKETS // 2
    # Half used: topped up in one more round trip, off the request path.
    await _settled(limiter.tickets, MAX_TICKETS)
    assert calls == ["r1", f"follow-up {MAX_TICKETS}", f"follow-up {MAX_TICKETS // 2}"]


async def test_a_ticket_admits_without_a_wait_with_its_headers_rendered(
    limiters: list[Limiter],
) -> None:
    limiter, key_id = limiters[0], uuid.uuid4().hex
    assert limiter.tickets is not None
    assert limiter.take_ticket(key_id, BUSY, 0) is None  # none granted yet
    _answered(limiter, key_id, BUSY, await limiter.reserve(key_id, BUSY, "r1", 0))
    await _settled(limiter.tickets, MAX_TICKETS)
    admission = limiter.take_ticket(key_id, BUSY, 0)  # no await: nothing can run between
    assert admission is not None and admission.admission_id.startswith("t-")
    assert admission.headers == rate_header_pairs(BUSY, admission.verdict)
    assert dict(admission.headers)[b"x-ratelimit-limit-requests"] == b"1000"
    assert len(limiter.tickets) == MAX_TICKETS - 1
    # A hit's limits are the request rate's alone, one object per limits.
    both = KeyLimits(requests_per_minute=5, tokens_per_minute=10)
    assert limiter.hit_limits(both) == KeyLimits(requests_per_minute=5)
    assert limiter.hit_limits(both) is limiter.hit_limits(both)


async def test_three_replicas_admit_exactly_the_limit(limiters: list[Limiter]) -> None:
    key_id = uuid.uuid4().hex
    verdicts = []
    for i in range(3 * 2 * RPM.requests_per_minute):  # type: ignore[operator]
        limiter = limiters[i % 3]
        admission = await limiter.reserve(key_id, RPM, f"r{i}", 0)
        verdicts.append(admission.verdict.is_allowed)
        if admission.verdict.is_allowed:
            _answered(limiter, key_id, RPM, admission)
        await asyncio.sleep(0.005)  # lets the replicas' refills land, as real traffic does
    assert sum(verdicts) == RPM.requests_per_minute
    assert sum(limiter.tickets.num_taken for limiter in limiters if limiter.tickets is not None) > 0
    window = await _window(limiters[0], key_id)
    assert len(window) == RPM.requests_per_minute  # every ticket Redis granted was used


async def test_a_used_ticket_is_counted_from_when_it_was_used(redis_url: str) -> None:
    link = FleetLink(FleetConfig(redis_url=redis_url))
    limiter = Limiter(link)
    assert limiter.shared is not None
    clock = [1000.0]
    limiter.tickets = TicketBook(
        limiter.shared, ttl_s=10.0, max_tickets=1, clock_s=lambda: clock[0]
    )
    key_id = uuid.uuid4().hex
    try:
        _answered(limiter, key_id, RPM, await limiter.reserve(key_id, RPM, "r1", 0))
        await _settled(limiter.tickets, 1)
        granted = {k: v for k, v in (await _window(limiter, key_id)).items() if k != "r1"}
        ((ticket_id, granted_ms),) = granted.items()
        clock[0] += 1.0  # the ticket waited a second for its request
        second = await limiter.reserve(key_id, RPM, "r2", 0)  # takes the ticket at 1001
        clock[0] += 5.0  # answered 5 s later (a long stream): counted from when it began
        _answered(limiter, key_id, RPM, second)
        for _ in range(200):
            used_ms = (await _window(limiter, key_id))[ticket_id]
            if used_ms != granted_ms:
                break
            await asyncio.sleep(0.01)
        assert used_ms < granted_ms - 4000.0  # 5 s before the follow-up ran, not at it

    finally:
        await limiter.aclose()
        await link.aclose()


async def test_a_ticket_used_at_once_is_not_re_dated(redis_url: str) -> None:
    link = FleetLink(FleetConfig(redis_url=redis_url))
    limiter = Limiter(link)
    assert limiter.shared is not None
    clock = [1000.0]
    limiter.tickets = TicketBook(limiter.shared, max_tickets=1, clock_s=lambda: clock[0])
    redated: list[str] = []
    follow_up = limiter.shared.follow_up

    async def counted(*args: object, **kwargs: object) -> object:
        redated.extend(member for member, _ in cast(FollowUp, args[2]).redates)
        return await follow_up(*args, **kwargs)  # type: ignore[arg-type]

    limiter.shared.follow_up = counted  # type: ignore[method-assign,assignment]
    key_id = uuid.uuid4().hex
    try:
        _answered(limiter, key_id, RPM, await limiter.reserve(key_id, RPM, "r1", 0))
        await _settled(limiter.tickets, 1)
        second = await limiter.reserve(key_id, RPM, "r2", 0)  # the same instant as its grant
        _answered(limiter, key_id, RPM, second)
        await _settled(limiter.tickets, 1)
        assert redated == []  # a Redis command saved: counted at most 50 ms early
    finally:
        await limiter.aclose()
        await link.aclose()


async def test_an_unused_ticket_is_given_back(redis_url: str) -> None:
    link = FleetLink(FleetConfig(redis_url=redis_url))
    limiter = Limiter(link)
    assert limiter.shared is not None
    limiter.tickets = TicketBook(limiter.shared, ttl_s=0.1, max_tickets=1)
    key_id = uuid.uuid4().hex
    try:
        _answered(limiter, key_id, RPM, await limiter.reserve(key_id, RPM, "r1", 0))
        await _settled(limiter.tickets, 1)
        assert len(await _window(limiter, key_id)) == 2
        await _settled(limiter.tickets, 0)
        for _ in range(200):
            if list(await _window(limiter, key_id)) == ["r1"]:
                break
            await asyncio.sleep(0.01)
        assert list(await _window(limiter, key_id)) == ["r1"]
    finally:
        await limiter.aclose()
        await link.aclose()


async def test_a_stopping_replica_gives_its_tickets_back(redis_url: str) -> None:
    link = FleetLink(FleetConfig(redis_url=redis_url))
    limiter = Limiter(link)
    assert limiter.tickets is not None
    key_id = uuid.uuid4().hex
    _answered(limiter, key_id, BUSY, await limiter.reserve(key_id, BUSY, "r1", 0))
    await _settled(limiter.tickets, MAX_TICKETS)
    await limiter.aclose()
    probe = aioredis.Redis.from_url(redis_url)
    assert limiter.shared is not None
    members = await probe.zrange(limiter.shared.keys(key_id)[0], 0, -1)
    assert members == [b"r1"]
    await probe.aclose()
    await link.aclose()


async def test_token_tickets_never_admit_more_tokens_than_the_limit(
    limiters: list[Limiter],
) -> None:
    key_id = uuid.uuid4().hex
    limits = KeyLimits(requests_per_minute=1000, tokens_per_minute=4000)
    admitted = 0
    for i in range(90):
        limiter = limiters[i % 3]
        admission = await limiter.reserve(key_id, limits, f"r{i}", 100)
        if admission.verdict.is_allowed:
            admitted += 1
            limiter.finish(key_id, limits, admission, 100, None)
        await asyncio.sleep(0.005)
    # Each admitted request reserved at least its 100 (a ticket reserves 200): never over.
    assert 0 < admitted <= 40
    assert sum(limiter.tickets.num_taken for limiter in limiters if limiter.tickets is not None)


async def test_an_unused_token_ticket_gives_its_tokens_back(redis_url: str) -> None:
    link = FleetLink(FleetConfig(redis_url=redis_url))
    limiter = Limiter(link)
    assert limiter.shared is not None
    limiter.tickets = TicketBook(limiter.shared, ttl_s=0.1, max_tickets=1, settle_delay_s=0.0)
    key_id = uuid.uuid4().hex
    limits = KeyLimits(tokens_per_minute=10_000)
    try:
        limiter.finish(key_id, limits, await limiter.reserve(key_id, limits, "r1", 100), 100, None)
        await _settled(limiter.tickets, 1)  # a ticket holding 200 tokens
        await _settled(limiter.tickets, 0)  # expired, given back
        await asyncio.sleep(0.1)
        probe = await limiter.shared.admit(key_id, limits, "r2", 50, 0.0)
        # 100 + 50 spent; with the ticket's 200 still reserved it would be under 9650.
        assert 9850 <= probe.tokens_remaining <= 9900
    finally:
        await limiter.aclose()
        await link.aclose()

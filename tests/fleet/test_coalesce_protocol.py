"""The fleet flight protocol on a real redis-server: lease, fenced writes, takeover, splice.

Each ``FleetCoalescer`` here stands for one replica (its own ``FleetLink``); the flights
are filled by scripted pumps and upstream calls, so every step is under the test's control.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import orjson
import pytest
import redis.asyncio

from hasten.config.fleet import FleetConfig
from hasten.errors import HastenError
from hasten.fleet import relay
from hasten.fleet.coalesce import FleetCoalescer, lease_key
from hasten.fleet.link import FleetLink
from hasten.proxy.flight import Flight
from hasten.proxy.ports import FleetJob
from hasten.upstream.client import UpstreamCall
from tests.support.scripted import Reply, ScriptedResponse, delta, sse, upstream
from tests.support.servers import redis_server

KEY = "tenant:chat:abc:1"
T = TypeVar("T")
WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " dog."]


def answer(words: list[str], ident: str) -> tuple[bytes, ...]:
    role = {"id": ident, "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    chunks = [{"id": ident, "created": 1, **delta(w)} for w in words]
    end = {
        "id": ident,
        "created": 1,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    return sse(role, *chunks, end, "[DONE]")


def text_of(flight: Flight) -> str:
    text = ""
    for line in b"".join(flight.chunks).split(b"\n\n"):
        if line.startswith(b"data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@dataclass
class Upstream:
    """One replica's way to the upstream: counts pumps (local leaders) and opened calls."""

    frames: tuple[bytes, ...]
    delay_s: float = 0.01
    num_pumps: int = 0
    num_opens: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    gate_at: int = -1  # a pump waits for ``gate`` before this frame

    async def pump(self, flight: Flight) -> None:
        self.num_pumps += 1
        flight.start(200, {"content-type": "text/event-stream"}, "up", 1.0)
        for i, frame in enumerate(self.frames):
            if i == self.gate_at:
                await self.gate.wait()
            await asyncio.sleep(self.delay_s)
            flight.push(frame)
        flight.finish()

    async def open(self) -> UpstreamCall:
        self.num_opens += 1
        reply = Reply(chunks=self.frames, chunk_delay_s=self.delay_s)
        deadline_s = time.monotonic() + 30
        return UpstreamCall(
            ScriptedResponse(reply), upstream("b"), headers={}, ttfb_ms=1.0, deadline_s=deadline_s
        )

    def job(self, *, is_idempotent: bool = True) -> FleetJob:
        return FleetJob(KEY, self.pump, self.open, None, None, True, "chat", is_idempotent)


async def until(probe: Callable[[], Awaitable[T | None]], timeout_s: float = 20.0) -> T:
    """The probe's first truthy value, polled; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value:
            return value
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def _at_least(count: Awaitable[int], minimum: int) -> bool:
    return await count >= minimum


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
async def links(redis_url: str) -> AsyncIterator[list[FleetLink]]:
    config = FleetConfig(redis_url=redis_url, lease_s=1.0)
    made = [FleetLink(config) for _ in range(3)]
    yield made
    for link in made:
        await link.aclose()


@pytest.fixture
async def fleet(links: list[FleetLink]) -> AsyncIterator[list[FleetCoalescer]]:
    """One coalescer per replica."""
    made = [FleetCoalescer(link) for link in links]
    yield made
    for coalescer in made:
        await coalescer.aclose()


async def test_one_leader_and_followers_get_the_same_bytes(fleet: list[FleetCoalescer]) -> None:
    ups = [Upstream(answer(WORDS, "x")) for _ in fleet]
    coalescers = fleet
    flights = [Flight() for _ in fleet]
    await asyncio.gather(
        *(c.pump(f, u.job()) for c, f, u in zip(coalescers, flights, ups, strict=True))
    )
    assert sum(u.num_pumps for u in ups) == 1 and sum(u.num_opens for u in ups) == 0
    assert {b"".join(f.chunks) for f in flights} == {b"".join(answer(WORDS, "x"))}
    assert all(f.error is None and f.status == 200 for f in flights)


async def test_a_late_follower_reads_the_finished_stream(fleet: list[FleetCoalescer]) -> None:
    first, late = Upstream(answer(WORDS, "x")), Upstream(answer(WORDS, "y"))
    leader = fleet[0]
    await leader.pump(Flight(), first.job())
    await leader.drain()
    flight = Flight()
    await fleet[1].pump(flight, late.job())
    assert late.num_pumps == late.num_opens == 0
    assert b"".join(flight.chunks) == b"".join(answer(WORDS, "x"))


async def dead_leader(
    link: FleetLink, frames: tuple[bytes, ...], lease_s: float, *, is_started: bool = True
) -> None:
    """A leader that published ``frames`` and died: its lease runs out, no end entry."""
    client = redis.asyncio.Redis.from_url(link.config.redis_url or "")
    lease = lease_key(link, KEY)
    await client.set(lease, "dead", px=round(lease_s * 1000))
    head = relay.start_fields(0, 200, {"content-type": "text/event-stream"}, "up", 1.0)
    entries = [head] if is_started else []
    entries += [relay.chunk_fields(i + 1, frame, 0) for i, frame in enumerate(frames)]
    for kind, seq, data, usage in entries:
        await client.xadd(f"{lease}:dead", {"k": kind, "n": seq, "d": data, "u": usage})
    await client.aclose()


async def test_a_lapsed_lease_is_taken_over_and_spliced(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    await dead_leader(links[0], answer(WORDS, "x")[:4], lease_s=1.5)
    ups = [Upstream(answer(WORDS, "fresh")) for _ in links[1:]]
    flights = [Flight(), Flight()]
    pumps = [
        coalescer.pump(f, u.job()) for coalescer, f, u in zip(fleet[1:], flights, ups, strict=True)
    ]
    await asyncio.wait_for(asyncio.gather(*pumps), 20)
    assert sum(u.num_opens for u in ups) == 1 and sum(u.num_pumps for u in ups) == 0
    for flight in flights:
        assert flight.error is None
        assert text_of(flight) == "".join(WORDS)
        whole = b"".join(flight.chunks)
        assert whole.count(b"[DONE]") == 1 and whole.count(b'"role"') == 1


async def test_a_different_regenerated_text_ends_in_a_clean_error(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    await dead_leader(links[0], answer(["A", " cat"], "x")[:3], lease_s=1.5)
    up = Upstream(answer(WORDS, "fresh"))
    flight = Flight()
    await asyncio.wait_for(fleet[1].pump(flight, up.job()), 20)
    assert up.num_opens == 1 and up.num_pumps == 0  # it took over, then checked the text
    assert flight.error is not None and flight.error.code == "resume_mismatch"
    assert text_of(flight) == "A cat"  # what was sent, and nothing of the other answer


async def test_a_leader_that_lost_its_lease_cannot_write(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    up = Upstream(answer(WORDS, "x"), gate_at=3)
    leader = fleet[0]
    flight = Flight()
    pump = asyncio.create_task(leader.pump(flight, up.job()))
    client = redis.asyncio.Redis.from_url(links[0].config.redis_url or "")
    lease = lease_key(links[0], KEY)
    token = await until(lambda: client.get(lease))
    stream = f"{lease}:{token.decode() if isinstance(token, bytes) else token}"
    await until(lambda: _at_least(client.xlen(stream), 4))  # start and three chunks
    await client.set(lease, "someone-else", px=5000)
    up.gate.set()
    await pump
    await leader.drain()
    assert flight.error is None and len(flight.chunks) == len(WORDS) + 3  # its clients are served
    assert await client.xlen(stream) == 4  # but nothing more was published
    assert await client.get(lease) == b"someone-else"
    await client.aclose()


async def test_a_cancelled_leader_drops_its_lease_at_once(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    async def cancelled(flight: Flight) -> None:
        flight.finish(HastenError("request cancelled", code="cancelled"))

    leader = fleet[0]
    await leader.pump(
        Flight(), FleetJob(KEY, cancelled, Upstream(()).open, None, None, True, "chat")
    )
    await leader.drain()
    client = redis.asyncio.Redis.from_url(links[0].config.redis_url or "")
    assert await client.get(lease_key(links[0], KEY)) is None
    await client.aclose()


async def test_a_leader_dead_before_its_first_byte_is_replaced_by_one_call(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    await dead_leader(links[0], (), lease_s=1.0, is_started=False)
    ups = [Upstream(answer(WORDS, "fresh")) for _ in fleet[1:]]
    flights = [Flight(), Flight()]
    pumps = [c.pump(f, u.job()) for c, f, u in zip(fleet[1:], flights, ups, strict=True)]
    await asyncio.wait_for(asyncio.gather(*pumps), 20)
    # Nothing had reached a client: the new leader calls as usual, the other follows it.
    assert sum(u.num_pumps for u in ups) == 1 and sum(u.num_opens for u in ups) == 0
    assert {b"".join(f.chunks) for f in flights} == {b"".join(answer(WORDS, "fresh"))}


async def test_a_request_that_must_not_run_twice_is_not_taken_over(
    links: list[FleetLink], fleet: list[FleetCoalescer]
) -> None:
    await dead_leader(links[0], answer(WORDS, "x")[:3], lease_s=1.0)
    up = Upstream(answer(WORDS, "fresh"))
    flight = Flight()
    await asyncio.wait_for(fleet[1].pump(flight, up.job(is_idempotent=False)), 20)
    assert up.num_opens == up.num_pumps == 0
    assert flight.error is not None and flight.error.code == "fleet_leader_lost"


async def test_a_leader_keeps_what_a_failed_write_held_and_sends_it_later(
    redis_url: str, fleet: list[FleetCoalescer]
) -> None:
    config = FleetConfig(redis_url=redis_url, lease_s=1.0, retry_backoff_s=0.2)
    link = FleetLink(config)
    leader = FleetCoalescer(link)
    up, other = Upstream(answer(WORDS, "x"), gate_at=3), Upstream(answer(WORDS, "y"))
    lead = asyncio.create_task(leader.pump(Flight(), up.job()))
    client = redis.asyncio.Redis.from_url(redis_url)
    lease = lease_key(link, KEY)
    token = await until(lambda: client.get(lease))
    stream = f"{lease}:{token.decode() if isinstance(token, bytes) else token}"
    await until(lambda: _at_least(client.xlen(stream), 4))
    link.mark_down("test", ConnectionError("a blip"))  # the next write fails at once
    follower = Flight()
    follow = asyncio.create_task(fleet[1].pump(follower, other.job()))
    up.gate.set()
    await asyncio.wait_for(asyncio.gather(lead, follow), 20)
    await leader.aclose()
    await link.aclose()
    await client.aclose()
    assert other.num_pumps == other.num_opens == 0
    assert follower.error is None
    assert b"".join(follower.chunks) == b"".join(answer(WORDS, "x"))

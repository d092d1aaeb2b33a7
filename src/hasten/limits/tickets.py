"""Pre-admitted requests, and each key's bookkeeping in one Redis round trip off the
request path.

A replica keeps up to ``MAX_TICKETS`` *tickets* per limited key: requests already admitted
in Redis by the same atomic script as any request (a member of the key's request window, a
block of tokens reserved in its bucket, a concurrency slot held) that no
request has used yet; more than one, so that a client sending requests back to back
(faster than a Redis round trip refills one) still finds one. The next request of that key
on this replica takes one at once, if its prompt estimate fits the ticket's tokens: no
Redis call before it is answered.

Everything else is done after the request was answered (so the work never competes with
it), for one key in one pipelined round trip (``SharedLedger.follow_up``), one at a time per
key: while one is in flight, what the next requests finish waits and goes in the next:
- each finished request's correction: its usage minus the tokens it reserved (a ticket's
  whole block), its cost, its slot freed;
- a ticket that waited more than ``REDATE_AFTER_S`` before it was used is re-dated to the
  time it was used, so the window counts the request when it happened (give or take 50 ms);
- the key's tickets topped up, once half of them are used.
A round trip starts at once for a slot to free or a top-up with no ticket left, within
``REFILL_DELAY_S`` for a top-up with tickets to spare (after the client read the answer);
otherwise what is pending waits at most ``SETTLE_DELAY_S``. So another replica sees a
finished request's tokens and spend within about that long after its answer, and a key
sending steadily makes one round trip per ``MAX_TICKETS / 2`` requests.

The fleet never admits more than a limit: every ticket is a request, tokens and a slot Redis
counted. A ticket nobody takes within ``TICKET_TTL_S`` is given back (its window entry
removed, its tokens refunded, its slot freed), so an idle replica holds back at most
``MAX_TICKETS`` requests and blocks of a key, for at most that long. What is held back
matters for a concurrency limit (an idle ticket's slot is one another replica cannot use):
a key gets concurrency tickets only as far as ``MAX_TICKET_SHARE`` of its limit allows (none
below 20 concurrent requests: such a key is admitted with a round trip per request). A key
with a budget gets no tickets: each of its requests reserves its own share of the budget in
Redis on admission (what it may cost), so the fleet's spend stays within the budget plus one
request's reservation (docs/limits.md).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from hasten.config.limits import KeyLimits
from hasten.errors import FleetUnavailable
from hasten.limits.headers import rate_header_pairs
from hasten.limits.ledger import Verdict
from hasten.limits.shared_ledger import FollowUp, Grant, Settlement, SharedLedger

TICKET_TTL_S = 1.0
MAX_TICKETS = 8  # refilled in one round trip once half are used
# A ticket used this soon after Redis granted it is left at its grant time: the window then
# counts that request at most this much early, and saves a Redis command per request.
REDATE_AFTER_S = 0.05
# Corrections that free nothing (tokens, spend, re-dates) wait at most this long for the
# key's next round trip: under load one carries many, and a key that still holds tickets
# makes no round trip per request.
SETTLE_DELAY_S = 0.1
# A top-up while tickets are left starts this much after the answer that asked for it, so
# that its work does not compete with the client reading that answer (as the deferred
# Redis writes of hasten.fleet.resp).
REFILL_DELAY_S = 0.002
# A ticket's tokens: twice the key's last prompt estimate, at least this, and at most this
# share of the key's tokens per minute; a replica's idle tickets hold back at most this
# share of any limit (at least one ticket, except of concurrency: none below 20 at once).
MIN_TICKET_TOKENS = 64
MAX_TICKET_SHARE = 0.05
_CLOSE_TIMEOUT_S = 1.0
_MAX_WANTED_KEPT = 65_536  # keys (and limits) whose wanted-ticket count is kept

# Tickets are kept per key and per limits: a hit's (its request rate only) carry no tokens
# or slot, and a key whose limits were changed stops using those granted under the old.
Slot = tuple[str, KeyLimits]


def num_tickets_for(limits: KeyLimits, num_tokens: int = 0, max_tickets: int = MAX_TICKETS) -> int:
    """How many tickets a replica keeps for a key with these limits, each reserving
    ``num_tokens`` (0: none, the key is admitted in Redis request by request)."""
    if limits.is_unlimited or limits.budget_usd is not None:
        # A budget is checked against what requests in progress reserved, each its own
        # amount: a ticket granted ahead would let a request through unchecked.
        return 0
    num = max_tickets
    if limits.max_concurrent is not None:
        num = min(num, int(limits.max_concurrent * MAX_TICKET_SHARE))
    if limits.requests_per_minute is not None:
        num = min(num, max(1, int(limits.requests_per_minute * MAX_TICKET_SHARE)))
    if limits.tokens_per_minute is not None and num_tokens:
        held = int(limits.tokens_per_minute * MAX_TICKET_SHARE) // num_tokens
        num = min(num, max(1, held))
    return num


@dataclass(frozen=True, slots=True)
class Admission:
    """How a request was admitted: the verdict; whether in Redis (True) or on this replica;
    the tokens reserved for it (its estimate, or the block of the ticket it took: what its
    usage is corrected against); the id of its window entry and slot (its own, or its
    ticket's); and the response headers that say so."""

    verdict: Verdict
    is_shared: bool
    num_tokens: int
    admission_id: str
    headers: tuple[tuple[bytes, bytes], ...]  # the x-ratelimit-* headers of the verdict


@dataclass(frozen=True, slots=True)
class Ticket:
    # Built when Redis granted it: the request that takes it builds nothing.
    admission: Admission  # shared; its id is the ticket's request-window member and slot
    granted_s: float
    limits: KeyLimits  # what it was granted under: what giving it back corrects

    @property
    def ticket_id(self) -> str:
        return self.admission.admission_id

    @property
    def num_tokens(self) -> int:
        """Reserved in the key's token bucket (0 without a token limit)."""
        return self.admission.num_tokens


@dataclass(slots=True)
class _Pending:
    """What a slot's next round trip sends."""

    settlements: list[Settlement] = field(default_factory=list)
    redates: list[tuple[str, float]] = field(default_factory=list)  # (ticket id, used at)
    forgets: list[str] = field(default_factory=list)
    is_refill: bool = False  # a request was answered: top the tickets up


class TicketBook:
    """This replica's unused tickets per limited key (oldest first), and the bookkeeping
    waiting for each key's next round trip."""

    def __init__(
        self,
        shared: SharedLedger,
        *,
        ttl_s: float = TICKET_TTL_S,
        max_tickets: int = MAX_TICKETS,
        settle_delay_s: float = SETTLE_DELAY_S,
        slot_lease_ms: float = 30_000.0,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shared = shared
        self._ttl_s = ttl_s
        self._max_tickets = max_tickets
        self._settle_delay_s = settle_delay_s
        self._slot_lease_ms = slot_lease_ms
        self._clock_s = clock_s
        self._tickets: dict[Slot, list[Ticket]] = {}
        self._pending: dict[Slot, _Pending] = {}
        self._sizes: dict[Slot, int] = {}  # the tokens the next ticket reserves
        self._wanted: dict[Slot, int] = {}  # how many tickets to keep (num_tickets_for)
        self._flushing: set[Slot] = set()
        self._delayed: dict[Slot, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Ticket ids: unique in a key's window across replicas and restarts, cheaply.
        self._id_prefix = "t-" + secrets.token_hex(8) + "-"
        self._id_counter = itertools.count()
        self.num_taken = 0

    def __len__(self) -> int:
        return sum(len(tickets) for tickets in self._tickets.values())

    def take(self, key_id: str, limits: KeyLimits, num_tokens: int = 0) -> Ticket | None:
        """A ticket for the caller's request (its estimate ``num_tokens`` fits it); None if
        there is no fresh one (then the request is admitted in Redis as usual)."""
        slot = (key_id, limits)
        tickets = self._tickets.get(slot)
        if not tickets:
            return None
        now_s = self._clock_s()
        if now_s - tickets[0].granted_s > self._ttl_s:
            for stale in tickets:  # the later ones were granted later, but idle too
                self._give_back(key_id, stale)
            tickets.clear()
            return None
        if limits.tokens_per_minute is not None and tickets[0].num_tokens < num_tokens:
            return None  # a prompt larger than the ticket: asked of Redis, the ticket kept
        ticket = tickets.pop(0)
        self.num_taken += 1
        if limits.requests_per_minute is not None and now_s - ticket.granted_s > REDATE_AFTER_S:
            self._pending_of(slot).redates.append((ticket.ticket_id, now_s))
        return ticket

    def follow_up(
        self,
        key_id: str,
        limits: KeyLimits,
        num_tokens: int = 0,
        settlement: Settlement | None = None,
    ) -> None:
        """After a request of this key was answered (under ``limits``, its prompt estimate
        ``num_tokens``): queues its correction, and tops the key's tickets up once half are
        used. A round trip starts now for a top-up or a slot to free, else within
        ``SETTLE_DELAY_S``; never two at once for a key."""
        slot = (key_id, limits)
        if limits.tokens_per_minute is not None:
            most = max(MIN_TICKET_TOKENS, int(limits.tokens_per_minute * MAX_TICKET_SHARE))
            size = min(most, max(MIN_TICKET_TOKENS, 2 * num_tokens))
            if self._sizes.get(slot) != size:
                self._sizes[slot] = size
                self._wanted.pop(slot, None)
        if settlement is not None:
            self._pending_of(slot).settlements.append(settlement)
        num_wanted = self._num_wanted(slot)
        num_left = len(self._tickets.get(slot, ()))
        if num_wanted and 2 * num_left <= num_wanted:
            self._pending_of(slot).is_refill = True
            if num_left:
                # Tickets to spare: the top-up waits until the client has read this answer.
                self._start_soon(key_id, slot, REFILL_DELAY_S)
            else:
                self._start(key_id, slot)
        elif limits.max_concurrent is not None and settlement is not None:
            self._start(key_id, slot)  # a slot another request may be waiting for
        elif slot in self._pending:
            self._start_soon(key_id, slot, self._settle_delay_s)

    async def aclose(self) -> None:
        """Gives back every unused ticket and sends what is pending, so a replica that
        stops holds back nothing."""
        for (key_id, _), tickets in list(self._tickets.items()):
            for ticket in tickets:
                self._give_back(key_id, ticket)
            tickets.clear()
        for key_id, limits in list(self._pending):
            self._start(key_id, (key_id, limits))
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=_CLOSE_TIMEOUT_S)
        for task in self._tasks:
            task.cancel()

    def _num_wanted(self, slot: Slot) -> int:
        num = self._wanted.get(slot)
        if num is None:
            if len(self._wanted) >= _MAX_WANTED_KEPT:
                self._wanted.clear()  # a cache of a pure function: recomputed on demand
            num = num_tickets_for(slot[1], self._sizes.get(slot, 0), self._max_tickets)
            self._wanted[slot] = num
        return num

    def _pending_of(self, slot: Slot) -> _Pending:
        pending = self._pending.get(slot)
        if pending is None:
            pending = self._pending[slot] = _Pending()
        return pending

    def _start_soon(self, key_id: str, slot: Slot, delay_s: float) -> None:
        """Starts the slot's round trip within ``delay_s``."""
        if slot in self._flushing or slot not in self._pending:
            return  # in flight (it picks this up) or nothing to send
        loop = asyncio.get_running_loop()
        due_s = loop.time() + delay_s
        delayed = self._delayed.get(slot)
        if delayed is not None:
            if delayed.when() <= due_s:
                return  # already due by then
            delayed.cancel()
        self._delayed[slot] = loop.call_at(due_s, self._start, key_id, slot)

    def _start(self, key_id: str, slot: Slot) -> None:
        delayed = self._delayed.pop(slot, None)
        if delayed is not None:
            delayed.cancel()
        if slot in self._flushing:
            return  # the round trip in flight picks this up when it is back
        self._flushing.add(slot)
        self._spawn(self._flush(key_id, slot))

    async def _flush(self, key_id: str, slot: Slot) -> None:
        limits = slot[1]
        is_denied = False  # at a limit: the next request asks Redis itself, learns when
        try:
            while True:
                pending = self._pending.pop(slot, None)
                if pending is None:
                    return
                num_new = 0
                if pending.is_refill and not is_denied:
                    num_new = self._num_wanted(slot) - len(self._tickets.get(slot, ()))
                num_tokens = self._sizes.get(slot, 0) if limits.tokens_per_minute else 0
                now_s = self._clock_s()
                work = FollowUp(
                    pending.settlements,
                    [(member, (now_s - used_s) * 1000.0) for member, used_s in pending.redates],
                    pending.forgets,
                    [Grant(self._new_id(), num_tokens) for _ in range(num_new)],
                )
                if not work:
                    continue
                verdicts = await self._shared.follow_up(key_id, limits, work, self._slot_lease_ms)
                for grant, verdict in zip(work.grants, verdicts, strict=True):
                    if verdict.is_allowed:
                        self._add(key_id, slot, grant, verdict)
                    else:
                        is_denied = True
        except FleetUnavailable:
            return  # Redis away: these corrections are lost, unused slots lapse with leases
        finally:
            self._flushing.discard(slot)
            if slot in self._pending:  # queued while the failing trip was out: due soon
                self._start_soon(key_id, slot, self._settle_delay_s)

    def _new_id(self) -> str:
        return self._id_prefix + str(next(self._id_counter))

    def _add(self, key_id: str, slot: Slot, grant: Grant, verdict: Verdict) -> None:
        limits = slot[1]
        headers = rate_header_pairs(limits, verdict)
        admission = Admission(verdict, True, grant.num_tokens, grant.request_id, headers)
        ticket = Ticket(admission, self._clock_s(), limits)
        self._tickets.setdefault(slot, []).append(ticket)
        loop = asyncio.get_running_loop()
        loop.call_later(self._ttl_s, self._expire, key_id, ticket)

    def _expire(self, key_id: str, ticket: Ticket) -> None:
        tickets = self._tickets.get((key_id, ticket.limits), [])
        if ticket in tickets:
            tickets.remove(ticket)
            self._give_back(key_id, ticket)

    def _give_back(self, key_id: str, ticket: Ticket) -> None:
        """Undoes an unused ticket in the key's next round trip (no top-up for it)."""
        limits = ticket.limits
        slot = (key_id, limits)
        pending = self._pending_of(slot)
        if limits.requests_per_minute is not None:
            pending.forgets.append(ticket.ticket_id)
        if ticket.num_tokens or limits.max_concurrent is not None:
            refund = Settlement(ticket.ticket_id, limits, -ticket.num_tokens, 0.0)
            pending.settlements.append(refund)
        if limits.max_concurrent is not None:
            self._start(key_id, slot)
        else:
            self._start_soon(key_id, slot, self._settle_delay_s)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

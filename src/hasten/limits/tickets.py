"""Pre-admitted requests: a key limited in requests and tokens per minute is admitted with
no Redis round trip on the request path.

A replica keeps up to ``MAX_TICKETS`` *tickets* per such key: requests already admitted
in Redis (granted by the same atomic script as any request: a member of the key's request
window, and for a token limit a block of tokens reserved in its bucket) that no request has
used yet; more than one, so that a client sending requests back to back (faster than a
Redis round trip refills one) still finds one. The next request of that key on this
replica takes one at once, if its prompt estimate fits the ticket's tokens; the request's
correction from usage is then counted against the ticket's whole block, as it would be
against its own reservation. Once the request is answered (so the work never competes with
it), the key's tickets are topped up, and a ticket that waited more than
``REDATE_AFTER_S`` is re-dated to the time it was used, so the window counts the request
when it happened (give or take those 50 ms).

The fleet therefore never admits more than a limit: every ticket is a request and tokens
Redis counted. A ticket nobody takes within ``TICKET_TTL_S`` is given back (removed from
the window, its tokens refunded), so an idle replica holds back at most ``MAX_TICKETS``
requests and blocks of its key, for at most that long.

Keys with a concurrency or spend limit are not pre-admitted: those need the request's own
slot or price, so they keep their one round trip per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from hasten.errors import FleetUnavailable
from hasten.limits.ledger import Verdict
from hasten.limits.shared import SharedLedger
from hasten.limits.spec import KeyLimits

TICKET_TTL_S = 1.0
MAX_TICKETS = 2
# A ticket used this soon after Redis granted it is left at its grant time: the window then
# counts that request at most this much early, and a client sending back to back saves a
# Redis call per request.
REDATE_AFTER_S = 0.05
# A ticket's tokens: twice the key's last prompt estimate, at least this, and at most this
# share of the key's tokens per minute (so replicas holding tickets hold back little).
MIN_TICKET_TOKENS = 64
MAX_TICKET_SHARE = 0.05
_CLOSE_TIMEOUT_S = 1.0

# Tickets are kept per key and per kind: a hit's carry no tokens, a miss's do.
Slot = tuple[str, bool]


def is_pre_admissible(limits: KeyLimits) -> bool:
    """True for a key limited only in requests and/or tokens per minute."""
    return (
        (limits.requests_per_minute is not None or limits.tokens_per_minute is not None)
        and limits.max_concurrent is None
        and limits.budget_usd is None
    )


@dataclass(frozen=True, slots=True)
class Ticket:
    ticket_id: str
    verdict: Verdict  # what Redis said when it admitted the ticket
    granted_s: float
    num_tokens: int  # reserved in the key's token bucket (0 without a token limit)
    limits: KeyLimits  # what it was granted under: what giving it back corrects


class TicketBook:
    """This replica's unused tickets per pre-admissible key (oldest first)."""

    def __init__(
        self,
        shared: SharedLedger,
        *,
        ttl_s: float = TICKET_TTL_S,
        max_tickets: int = MAX_TICKETS,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shared = shared
        self._ttl_s = ttl_s
        self._max_tickets = max_tickets
        self._clock_s = clock_s
        self._tickets: dict[Slot, list[Ticket]] = {}
        self._used: dict[Slot, list[tuple[str, float]]] = {}  # (ticket id, used at)
        self._sizes: dict[Slot, int] = {}  # the tokens the next ticket reserves
        self._refilling: set[Slot] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.num_taken = 0

    def __len__(self) -> int:
        return sum(len(tickets) for tickets in self._tickets.values())

    def take(self, key_id: str, limits: KeyLimits, num_tokens: int = 0) -> Ticket | None:
        """A ticket for the caller's request (its estimate ``num_tokens`` fits it); None if
        there is no fresh one (then the request is admitted in Redis as usual)."""
        slot = _slot(key_id, limits)
        tickets = self._tickets.get(slot)
        if not tickets:
            return None
        now_s = self._clock_s()
        if now_s - tickets[0].granted_s > self._ttl_s:
            for stale in tickets:  # the later ones were granted later, but idle too
                self._spawn(self._give_back(key_id, stale))
            tickets.clear()
            return None
        if tickets[0].num_tokens < num_tokens:
            return None  # a prompt larger than the ticket: asked of Redis, the ticket kept
        ticket = tickets.pop(0)
        self.num_taken += 1
        if limits.requests_per_minute is not None and now_s - ticket.granted_s > REDATE_AFTER_S:
            self._used.setdefault(slot, []).append((ticket.ticket_id, now_s))
        return ticket

    def follow_up(self, key_id: str, limits: KeyLimits, num_tokens: int = 0) -> None:
        """After a request of this key was answered (its prompt estimate ``num_tokens``):
        re-dates the tickets it used and tops the key's tickets up, in the background
        (one refill at a time per key)."""
        slot = _slot(key_id, limits)
        if limits.tokens_per_minute is not None:
            most = max(MIN_TICKET_TOKENS, int(limits.tokens_per_minute * MAX_TICKET_SHARE))
            self._sizes[slot] = min(most, max(MIN_TICKET_TOKENS, 2 * num_tokens))
        used = self._used.pop(slot, [])
        num_held = len(self._tickets.get(slot, ()))
        is_refill = num_held < self._max_tickets and slot not in self._refilling
        if is_refill:
            self._refilling.add(slot)
        if used or is_refill:
            self._spawn(self._follow_up(key_id, limits, used, is_refill))

    async def aclose(self) -> None:
        """Gives back every unused ticket, so a replica that stops holds back nothing."""
        for (key_id, _), tickets in self._tickets.items():
            for ticket in tickets:
                self._spawn(self._give_back(key_id, ticket))
        self._tickets.clear()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=_CLOSE_TIMEOUT_S)
        for task in self._tasks:
            task.cancel()

    async def _follow_up(
        self, key_id: str, limits: KeyLimits, used: list[tuple[str, float]], is_refill: bool
    ) -> None:
        slot = _slot(key_id, limits)
        try:
            for ticket_id, used_s in used:
                ago_ms = (self._clock_s() - used_s) * 1000.0
                await self._shared.redate(key_id, ticket_id, ago_ms)
            if not is_refill:
                return  # another follow-up is asking for this key's next tickets
            while len(self._tickets.get(slot, ())) < self._max_tickets:
                ticket_id = "ticket-" + uuid.uuid4().hex
                num_tokens = self._sizes.get(slot, 0)
                verdict = await self._shared.admit(key_id, limits, ticket_id, num_tokens, 0.0)
                if not verdict.is_allowed:
                    return  # at a limit: the next request asks Redis itself, learns when
                ticket = Ticket(ticket_id, verdict, self._clock_s(), num_tokens, limits)
                self._tickets.setdefault(slot, []).append(ticket)
                loop = asyncio.get_running_loop()
                loop.call_later(self._ttl_s, self._expire, key_id, limits, ticket)
        except FleetUnavailable:
            return
        finally:
            if is_refill:
                self._refilling.discard(slot)

    def _expire(self, key_id: str, limits: KeyLimits, ticket: Ticket) -> None:
        tickets = self._tickets.get(_slot(key_id, limits), [])
        if ticket in tickets:
            tickets.remove(ticket)
            self._spawn(self._give_back(key_id, ticket))

    async def _give_back(self, key_id: str, ticket: Ticket) -> None:
        limits = ticket.limits
        with contextlib.suppress(FleetUnavailable):
            if limits.requests_per_minute is not None:
                await self._shared.forget(key_id, ticket.ticket_id)
            if ticket.num_tokens:
                await self._shared.settle(key_id, limits, ticket.ticket_id, -ticket.num_tokens, 0)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _slot(key_id: str, limits: KeyLimits) -> Slot:
    return (key_id, limits.tokens_per_minute is not None)

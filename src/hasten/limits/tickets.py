"""Pre-admitted requests: a key limited only in requests per minute is admitted with no
Redis round trip on the request path.

A replica keeps up to ``MAX_TICKETS`` *tickets* per such key: requests already admitted
in Redis (members of the key's request window, granted by the same atomic script as any
request) that no request has used yet; more than one, so that a client sending requests
back to back (faster than a Redis round trip refills one) still finds one. The next
request of that key on this replica takes one at once; once that request is answered (so
the work never competes with it), the key's tickets are topped up, and a ticket that
waited more than ``REDATE_AFTER_S`` is re-dated to the time it was used, so the window
counts the request when it happened (give or take those 50 ms). The fleet
therefore never admits more than the limit: every ticket is a request Redis counted. A
ticket nobody takes within ``TICKET_TTL_S`` is given back (removed from the window), so an
idle replica holds back at most ``MAX_TICKETS`` requests of its key, for at most that long.

Keys with a token, concurrency or spend limit are not pre-admitted: those need the
request's own estimate, slot or price, so they keep their one round trip per request.
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
_CLOSE_TIMEOUT_S = 1.0


def is_pre_admissible(limits: KeyLimits) -> bool:
    """True for a key whose only limit is a request rate."""
    return (
        limits.requests_per_minute is not None
        and limits.tokens_per_minute is None
        and limits.max_concurrent is None
        and limits.budget_usd is None
    )


@dataclass(frozen=True, slots=True)
class Ticket:
    ticket_id: str
    verdict: Verdict  # what Redis said when it admitted the ticket
    granted_s: float


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
        self._tickets: dict[str, list[Ticket]] = {}
        self._used: dict[str, list[tuple[str, float]]] = {}  # key -> (ticket id, used at)
        self._refilling: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.num_taken = 0

    def __len__(self) -> int:
        return sum(len(tickets) for tickets in self._tickets.values())

    def take(self, key_id: str, limits: KeyLimits) -> Verdict | None:
        """The verdict of this key's ticket, used by the caller's request; None if there is
        no fresh one (then the request is admitted in Redis as usual)."""
        tickets = self._tickets.get(key_id)
        if not tickets:
            return None
        ticket = tickets.pop(0)
        now_s = self._clock_s()
        if now_s - ticket.granted_s > self._ttl_s:
            for stale in (ticket, *tickets):  # the later ones were granted later, but idle too
                self._spawn(self._give_back(key_id, stale))
            tickets.clear()
            return None
        self.num_taken += 1
        if now_s - ticket.granted_s > REDATE_AFTER_S:
            self._used.setdefault(key_id, []).append((ticket.ticket_id, now_s))
        return ticket.verdict

    def follow_up(self, key_id: str, limits: KeyLimits) -> None:
        """After a request of this key was answered: re-dates the tickets it used and tops
        the key's tickets up, in the background (one refill at a time per key)."""
        used = self._used.pop(key_id, [])
        num_held = len(self._tickets.get(key_id, ()))
        is_refill = num_held < self._max_tickets and key_id not in self._refilling
        if is_refill:
            self._refilling.add(key_id)
        if used or is_refill:
            self._spawn(self._follow_up(key_id, limits, used, is_refill))

    async def aclose(self) -> None:
        """Gives back every unused ticket, so a replica that stops holds back nothing."""
        for key_id, tickets in self._tickets.items():
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
        try:
            for ticket_id, used_s in used:
                ago_ms = (self._clock_s() - used_s) * 1000.0
                await self._shared.redate(key_id, ticket_id, ago_ms)
            if not is_refill:
                return  # another follow-up is asking for this key's next tickets
            while len(self._tickets.get(key_id, ())) < self._max_tickets:
                ticket_id = "ticket-" + uuid.uuid4().hex
                verdict = await self._shared.admit(key_id, limits, ticket_id, 0, 0.0)
                if not verdict.is_allowed:
                    return  # at the limit: the next request asks Redis itself, learns when
                ticket = Ticket(ticket_id, verdict, self._clock_s())
                self._tickets.setdefault(key_id, []).append(ticket)
                loop = asyncio.get_running_loop()
                loop.call_later(self._ttl_s, self._expire, key_id, ticket)
        except FleetUnavailable:
            return
        finally:
            if is_refill:
                self._refilling.discard(key_id)

    def _expire(self, key_id: str, ticket: Ticket) -> None:
        tickets = self._tickets.get(key_id, [])
        if ticket in tickets:
            tickets.remove(ticket)
            self._spawn(self._give_back(key_id, ticket))

    async def _give_back(self, key_id: str, ticket: Ticket) -> None:
        with contextlib.suppress(FleetUnavailable):
            await self._shared.forget(key_id, ticket.ticket_id)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

"""Enforcing a key's limits around one request: admit before answering, settle after.

``Limiter.open(...)`` gives the request path (``hasten.proxy.handle``) one request's
``Limit`` (the pipeline's port, ``hasten.proxy.ports``). A key without limits gets the
shared ``NO_LIMIT`` (no Redis call, no allocation). For a limited key the path calls
``Enforcement.admit`` once it knows whether the exact cache has the answer, before any
byte is sent (a denial is the 429 of ``hasten.limits.headers``), and sends the
x-ratelimit-* headers it returns; ``settle``, however the request ended (answered, failed,
client gone, cancelled), frees its slot, corrects its token reservation from the answer's
usage and charges its cost.

Where the counts live: with ``[fleet]``, in Redis, exact across replicas
(``hasten.limits.shared``); without it, or while Redis is away, in this process
(``hasten.limits.ledger`` itself), exact for one gateway and per replica in a fleet. In
Redis, a request is admitted from a ticket Redis granted ahead when there is one, and its
correction sent in its key's next round trip (``hasten.limits.tickets``): no round trip on
the request path.

What counts: every admitted request counts against requests per minute. An exact-cache hit
counts against that only: it holds no upstream capacity and spends nothing, so it takes no
concurrency slot and reserves no tokens. Any other request is admitted against every limit
before the semantic lookup and the upstream call; tokens and spend count only for a request
that made the upstream call: a semantic hit or a coalesced follower spends nothing
upstream, so its reservation is refunded. Without usage in the answer (a stream whose
client did not ask for it and that the cache did not store), the prompt estimate stands and
no completion tokens are known.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hasten.config.limits import KeyLimits
from hasten.config.prices import ModelPrice, price_of
from hasten.errors import FleetUnavailable, HastenError
from hasten.limits import ledger
from hasten.limits.estimate import estimate_prompt_tokens
from hasten.limits.headers import denial, rate_header_pairs
from hasten.limits.shared import Settlement, SharedLedger
from hasten.limits.tickets import Admission, TicketBook
from hasten.proxy.ports import NO_LIMIT, Limit, Spent
from hasten.values.caller import Caller
from hasten.values.usage import usage_tokens
from hasten.wire.asgi import Headers

if TYPE_CHECKING:
    from hasten.fleet.link import FleetLink
    from hasten.routing.models import ResolvedModel

# A fleet slot's lease: renewed every third of it while its request lives, so a replica
# that dies holding slots gives them back within this long.
SLOT_LEASE_S = 30.0
# Distinct limits whose hit-only form is kept (one per configured limit set, in practice).
_MAX_HIT_LIMITS = 4096


class Limiter:
    """Every key's counts: in Redis with a fleet, else (and while Redis is away) here."""

    def __init__(
        self,
        fleet: FleetLink | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
        *,
        slot_lease_s: float = SLOT_LEASE_S,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self.slot_lease_ms = slot_lease_s * 1000.0
        self.shared = None if fleet is None else SharedLedger(fleet)
        # Pre-admitted tickets, and each key's bookkeeping off the request path.
        self.tickets = (
            None
            if self.shared is None
            else TicketBook(self.shared, slot_lease_ms=self.slot_lease_ms)
        )
        self.prices: Mapping[str, ModelPrice] = prices or {}
        self._clock_s = clock_s
        self._ledgers: dict[str, ledger.KeyLedger] = {}
        self._hit_limits: dict[KeyLimits, KeyLimits] = {}
        self._held: dict[str, str] = {}  # request id -> key id: slots held in Redis
        self._renewer: asyncio.Task[None] | None = None
        self.num_local_admissions = 0  # counted on this replica only (no fleet, Redis away)

    @property
    def num_held_slots(self) -> int:
        """Fleet slots this replica holds (and renews) for requests in progress."""
        return len(self._held)

    def open(self, caller: Caller, model: ResolvedModel, raw_body: bytes, request_id: str) -> Limit:
        """One request's limits; ``NO_LIMIT`` for a key without any."""
        limits = caller.limits
        if limits is None or limits.is_unlimited:
            return NO_LIMIT
        key_id = caller.key_id or caller.tenant or ""
        return Enforcement(self, limits, key_id, model, raw_body, request_id)

    def hit_limits(self, limits: KeyLimits) -> KeyLimits:
        """What an exact-cache hit counts against: the request rate only (kept per limits,
        so a hit builds nothing and its tickets are found by equality at once)."""
        hit = self._hit_limits.get(limits)
        if hit is None:
            if len(self._hit_limits) >= _MAX_HIT_LIMITS:
                self._hit_limits.clear()
            hit = KeyLimits(requests_per_minute=limits.requests_per_minute)
            self._hit_limits[limits] = hit
        return hit

    def take_ticket(self, key_id: str, limits: KeyLimits, num_tokens: int) -> Admission | None:
        """An admission from a pre-admitted ticket, without a wait; None without one."""
        shared, tickets = self.shared, self.tickets
        if shared is None or tickets is None or not shared.link.is_up:
            return None
        ticket = tickets.take(key_id, limits, num_tokens)
        if ticket is None:
            return None
        if limits.max_concurrent is not None:
            self._hold(key_id, ticket.ticket_id)  # its slot is now this request's
        return ticket.admission

    async def reserve(
        self, key_id: str, limits: KeyLimits, request_id: str, num_tokens: int
    ) -> Admission:
        """Admits a request: from a pre-admitted ticket, else in Redis, else (no fleet, or
        Redis away) on this replica."""
        admission = self.take_ticket(key_id, limits, num_tokens)
        if admission is not None:
            return admission
        return await self.admit_counted(key_id, limits, request_id, num_tokens)

    async def admit_counted(
        self, key_id: str, limits: KeyLimits, request_id: str, num_tokens: int
    ) -> Admission:
        """Admits a request without a ticket: counted in Redis, else (no fleet, or Redis
        away) on this replica."""
        shared = self.shared
        if shared is not None and shared.link.is_up:
            try:
                verdict = await shared.admit(
                    key_id, limits, request_id, num_tokens, self.slot_lease_ms
                )
            except FleetUnavailable:
                pass
            else:
                if verdict.is_allowed and limits.max_concurrent is not None:
                    self._hold(key_id, request_id)
                headers = rate_header_pairs(limits, verdict)
                return Admission(verdict, True, num_tokens, request_id, headers)
        self.num_local_admissions += 1
        book = self._ledgers.get(key_id)
        if book is None:
            book = self._ledgers[key_id] = ledger.KeyLedger()
        # A local slot needs no lease: it cannot outlive this process.
        verdict = ledger.admit(book, limits, self._now_ms(), request_id, num_tokens, math.inf)
        headers = rate_header_pairs(limits, verdict)
        return Admission(verdict, False, num_tokens, request_id, headers)

    def finish(
        self,
        key_id: str,
        limits: KeyLimits,
        admission: Admission,
        estimate: int,
        settlement: Settlement | None,
    ) -> None:
        """After an admitted request was answered (``limits``: what it was admitted under;
        ``estimate``: its prompt estimate): frees its slot, corrects its tokens and charges
        its cost (``settlement``; None when there is nothing to correct). On this replica at
        once; in Redis in the key's next round trip (``hasten.limits.tickets``), which also
        tops the key's tickets up."""
        if not admission.is_shared:
            if settlement is not None:
                book = self._ledgers[key_id]
                ledger.settle(
                    book,
                    limits,
                    self._now_ms(),
                    settlement.request_id,
                    settlement.token_delta,
                    settlement.cost_usd,
                )
            return
        self._held.pop(admission.admission_id, None)
        # Redis away by then: the slot lapses with its lease; the correction is lost.
        assert self.tickets is not None
        self.tickets.follow_up(key_id, limits, estimate, settlement)

    async def aclose(self) -> None:
        if self.tickets is not None:
            await self.tickets.aclose()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer

    def _hold(self, key_id: str, request_id: str) -> None:
        self._held[request_id] = key_id
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_held())

    async def _renew_held(self) -> None:
        """While any request holds a fleet slot: renews them all, one call per tick."""
        assert self.shared is not None
        while self._held:
            await asyncio.sleep(self.slot_lease_ms / 3000.0)
            held = [(key_id, request_id) for request_id, key_id in self._held.items()]
            with contextlib.suppress(FleetUnavailable):
                await self.shared.renew(held, self.slot_lease_ms)

    def _now_ms(self) -> float:
        return self._clock_s() * 1000.0


class Enforcement:
    """One limited request: admitted once the path knows hit from miss, settled on exit."""

    __slots__ = (
        "_admission",
        "_admitted_limits",
        "_estimate",
        "_is_hit",
        "_key_id",
        "_limiter",
        "_limits",
        "_model",
        "_raw_body",
        "_request_id",
    )

    def __init__(
        self,
        limiter: Limiter,
        limits: KeyLimits,
        key_id: str,
        model: ResolvedModel,
        raw_body: bytes,
        request_id: str,
    ) -> None:
        self._limiter, self._limits, self._key_id = limiter, limits, key_id
        self._model, self._raw_body, self._request_id = model, raw_body, request_id
        self._estimate = 0
        self._admission: Admission | None = None
        self._is_hit = False
        self._admitted_limits = limits  # what admit() counted: a hit, its request rate only

    @property
    def is_reading_usage(self) -> bool:
        """Only a token limit or a budget reads the answer's usage."""
        return self._limits.tokens_per_minute is not None or self._limits.budget_usd is not None

    async def admit(self, *, is_hit: bool) -> Headers:
        """Admits the request (a 429 when a limit says no) before any byte is answered;
        returns the rate headers its answer carries.

        A cache hit counts against the request rate only: it holds no upstream capacity and
        spends no tokens or money, so it takes no slot and reserves no tokens. Either is
        admitted from a pre-admitted ticket when one is at hand (``hasten.limits.tickets``).
        """
        limits, limiter = self._limits, self._limiter
        if is_hit:
            if limits.requests_per_minute is None:
                self._is_hit = True
                return []  # nothing a hit spends is limited for this key
            limits = limiter.hit_limits(limits)
        elif self.is_reading_usage:
            self._estimate = estimate_prompt_tokens(self._raw_body)
        # A ticket first, without a coroutine: on a hit this is the whole of the limit's work.
        admission = limiter.take_ticket(self._key_id, limits, self._estimate)
        if admission is None:
            admission = await limiter.admit_counted(
                self._key_id, limits, self._request_id, self._estimate
            )
            if not admission.verdict.is_allowed:
                raise denial(limits, admission.verdict, admission.num_tokens)
        self._is_hit, self._admission, self._admitted_limits = is_hit, admission, limits
        return list(admission.headers)

    def settle(self, spent: Spent, error: BaseException | None) -> None:
        admission = self._admission
        if admission is None:
            return  # never counted
        if isinstance(error, HastenError):  # the app renders it: the same rate headers
            error.headers.update(
                (name.decode(), value.decode()) for name, value in admission.headers
            )
        # No await here: a second cancellation cannot lose the release, and the Redis side
        # is one round trip after the answer (``hasten.limits.tickets``).
        settlement = None if self._is_hit else self._settlement(admission, spent)
        self._limiter.finish(
            self._key_id, self._admitted_limits, admission, self._estimate, settlement
        )

    def _settlement(self, admission: Admission, spent: Spent) -> Settlement | None:
        """The finished miss's correction; None when there is nothing to correct or free."""
        limits = self._limits
        token_delta, cost_usd = self._spent(admission.num_tokens, spent)
        if (
            limits.max_concurrent is None
            and (limits.tokens_per_minute is None or token_delta == 0)
            and (limits.budget_usd is None or cost_usd <= 0.0)
        ):
            return None
        return Settlement(admission.admission_id, limits, token_delta, cost_usd)

    def _spent(self, num_reserved: int, spent: Spent) -> tuple[int, float]:
        """(tokens used minus those reserved, USD) of the finished request."""
        if not spent.is_upstream_call:
            return -num_reserved, 0.0  # a hit, a follower: nothing spent upstream
        tokens_in, tokens_out = usage_tokens(spent.usage_tail)
        if tokens_in is None and tokens_out is None:
            tokens_in, tokens_out = self._estimate, 0  # no usage: the estimate stands
        num_in, num_out = tokens_in or 0, tokens_out or 0
        cost_usd = 0.0
        if self._limits.budget_usd is not None:
            model = self._model
            price = price_of(
                self._limiter.prices, model.requested, model.name, model.upstream_model
            )
            cost_usd = 0.0 if price is None else price.cost_usd(num_in, num_out)
        return num_in + num_out - num_reserved, cost_usd

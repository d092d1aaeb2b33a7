"""Enforcing a key's limits around one request: admit before answering, settle after.

``Limiter.enforce(exchange)`` is the request path's one context (``hasten.proxy.handle``)
around the answer. A key without limits gets a shared no-op context (no Redis call, no
allocation). For a limited key the path calls ``Enforcement.admit`` once it knows whether
the exact cache has the answer, before any byte is sent (a denial is the 429 of
``hasten.limits.headers``); its response carries the x-ratelimit-* headers, and on exit,
however the request ended (answered, failed, client gone, cancelled), its slot is freed,
its token reservation corrected from the answer's usage and its cost charged.

Where the counts live: with ``[fleet]``, in Redis, exact across replicas
(``hasten.limits.shared``); without it, or while Redis is away, in this process
(``hasten.limits.ledger`` itself), exact for one gateway and per replica in a fleet. A
request counted only against a request rate is admitted from a ticket Redis granted ahead
(``hasten.limits.tickets``), with no round trip on the request path.

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
from types import TracebackType
from typing import TYPE_CHECKING

from hasten.errors import FleetUnavailable, HastenError
from hasten.limits import ledger
from hasten.limits.estimate import estimate_prompt_tokens
from hasten.limits.headers import denial, rate_headers
from hasten.limits.prices import ModelPrice, price_of
from hasten.limits.shared import SharedLedger
from hasten.limits.spec import KeyLimits
from hasten.limits.tickets import TicketBook, is_pre_admissible
from hasten.metrics.usage import usage_tokens

if TYPE_CHECKING:
    from hasten.asgi import Message, Send
    from hasten.fleet.link import FleetLink
    from hasten.proxy.handle import Exchange

# A fleet slot's lease: renewed every third of it while its request lives, so a replica
# that dies holding slots gives them back within this long.
SLOT_LEASE_S = 30.0
_UNLIMITED: contextlib.nullcontext[None] = contextlib.nullcontext()


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
        self.shared = None if fleet is None else SharedLedger(fleet)
        # Requests-only keys are admitted from a pre-admitted ticket (hasten.limits.tickets).
        self.tickets = None if self.shared is None else TicketBook(self.shared)
        self.prices: Mapping[str, ModelPrice] = prices or {}
        self.slot_lease_ms = slot_lease_s * 1000.0
        self._clock_s = clock_s
        self._ledgers: dict[str, ledger.KeyLedger] = {}
        self._held: dict[str, str] = {}  # request id -> key id: slots held in Redis
        self._renewer: asyncio.Task[None] | None = None
        self._settling: set[asyncio.Task[None]] = set()
        self.num_local_admissions = 0  # counted on this replica only (no fleet, Redis away)

    @property
    def num_held_slots(self) -> int:
        """Fleet slots this replica holds (and renews) for requests in progress."""
        return len(self._held)

    def enforce(self, request: Exchange) -> contextlib.AbstractAsyncContextManager[object]:
        """The context the answer runs in; a no-op for a key without limits."""
        caller = request.caller
        limits = None if caller is None else caller.limits
        if caller is None or limits is None or limits.is_unlimited:
            return _UNLIMITED
        return Enforcement(self, request, caller.key_id or caller.tenant or "", limits)

    async def reserve(
        self, key_id: str, limits: KeyLimits, request_id: str, num_tokens: int
    ) -> tuple[ledger.Verdict, bool, int]:
        """The verdict; whether it was taken in Redis (True) or on this replica; and the
        tokens reserved for the request: its estimate, or the tokens of the pre-admitted
        ticket it took (what its usage is corrected against)."""
        shared = self.shared
        if shared is not None and shared.link.is_up:
            if self.tickets is not None and is_pre_admissible(limits):
                ticket = self.tickets.take(key_id, limits, num_tokens)
                if ticket is not None:
                    return ticket.verdict, True, ticket.num_tokens
            try:
                verdict = await shared.admit(
                    key_id, limits, request_id, num_tokens, self.slot_lease_ms
                )
            except FleetUnavailable:
                pass
            else:
                if verdict.is_allowed and limits.max_concurrent is not None:
                    self._hold(key_id, request_id)
                return verdict, True, num_tokens
        self.num_local_admissions += 1
        book = self._ledgers.get(key_id)
        if book is None:
            book = self._ledgers[key_id] = ledger.KeyLedger()
        # A local slot needs no lease: it cannot outlive this process.
        verdict = ledger.admit(book, limits, self._now_ms(), request_id, num_tokens, math.inf)
        return verdict, False, num_tokens

    async def settle(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        is_shared: bool,
        token_delta: int,
        cost_usd: float,
    ) -> None:
        if not is_shared:
            book = self._ledgers[key_id]
            ledger.settle(book, limits, self._now_ms(), request_id, token_delta, cost_usd)
            return
        self._held.pop(request_id, None)
        assert self.shared is not None
        # Redis away: the slot lapses with its lease; this request's correction is lost.
        with contextlib.suppress(FleetUnavailable):
            await self.shared.settle(key_id, limits, request_id, token_delta, cost_usd)

    def follow_up(self, key_id: str, limits: KeyLimits, num_tokens: int = 0) -> None:
        """After a request was answered (its prompt estimate ``num_tokens``): its ticket's
        bookkeeping and the next tickets."""
        if self.tickets is not None and is_pre_admissible(limits):
            self.tickets.follow_up(key_id, limits, num_tokens)

    def settle_soon(self, settling: asyncio.Task[None]) -> None:
        """Keeps a settling task alive until it is done (a cancelled request's too)."""
        self._settling.add(settling)
        settling.add_done_callback(self._settling.discard)

    async def aclose(self) -> None:
        if self.tickets is not None:
            await self.tickets.aclose()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._settling:
            await asyncio.wait(self._settling, timeout=1.0)

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
        "_admitted_limits",
        "_estimate",
        "_headers",
        "_is_admitted",
        "_is_hit",
        "_is_shared",
        "_key_id",
        "_limiter",
        "_limits",
        "_num_tokens",
        "_request",
        "_tap",
    )

    def __init__(self, limiter: Limiter, request: Exchange, key_id: str, limits: KeyLimits) -> None:
        self._limiter, self._request, self._key_id, self._limits = limiter, request, key_id, limits
        self._num_tokens = 0  # reserved: the estimate, or a ticket's tokens
        self._estimate = 0
        self._is_shared = False
        self._is_admitted = self._is_hit = False
        self._admitted_limits = limits  # what admit() counted: a hit, its request rate only
        self._headers: dict[str, str] = {}
        self._tap: _Tap | None = None

    async def __aenter__(self) -> Enforcement:
        # Admitted by the request path once it knows a hit from a miss (``admit``).
        self._request.limit = self
        return self

    async def admit(self, *, is_hit: bool) -> None:
        """Admits the request (a 429 when a limit says no) before any byte is answered.

        A cache hit counts against the request rate only: it holds no upstream capacity and
        spends no tokens or money, so it takes no slot, reserves no tokens and is admitted
        from a pre-admitted ticket when one is at hand (``hasten.limits.tickets``).
        """
        limits, request = self._limits, self._request
        if is_hit:
            if limits.requests_per_minute is None:
                self._is_hit = True
                return  # nothing a hit spends is limited for this key
            limits = KeyLimits(requests_per_minute=limits.requests_per_minute)
        elif limits.tokens_per_minute is not None or limits.budget_usd is not None:
            self._num_tokens = estimate_prompt_tokens(request.raw_body)
        self._estimate = self._num_tokens
        verdict, self._is_shared, self._num_tokens = await self._limiter.reserve(
            self._key_id, limits, request.request_id, self._num_tokens
        )
        if not verdict.is_allowed:
            raise denial(limits, verdict, self._num_tokens)
        self._is_hit, self._is_admitted = is_hit, True
        self._admitted_limits = limits
        self._headers = rate_headers(limits, verdict)
        tap = self._tap = _Tap(request.send, self._headers)
        request.send = tap.send

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, HastenError):
            exc.headers.update(self._headers)  # the app renders it: the same rate headers
        if self._is_admitted and self._is_shared:
            # Now that it is answered: its ticket's bookkeeping, the next tickets.
            self._limiter.follow_up(self._key_id, self._admitted_limits, self._estimate)
        if not self._is_admitted or self._is_hit:
            return  # never counted, or a hit: no slot held, no tokens reserved
        token_delta, cost_usd = self._spent()
        limits = self._limits
        if (
            limits.max_concurrent is None
            and (limits.tokens_per_minute is None or token_delta == 0)
            and (limits.budget_usd is None or cost_usd <= 0.0)
        ):
            return  # nothing to release or correct: a requests-only key's one call is its admit
        settling = self._limiter.settle(
            self._key_id,
            self._limits,
            self._request.request_id,
            self._is_shared,
            token_delta,
            cost_usd,
        )
        if not self._is_shared:
            await settling  # in memory: nothing to wait for
            return
        task = asyncio.ensure_future(settling)
        self._limiter.settle_soon(task)
        await asyncio.shield(task)  # a second cancellation cannot lose the release

    def _spent(self) -> tuple[int, float]:
        """(tokens used minus those reserved, USD) of the finished request."""
        request = self._request
        if not request.is_upstream_call:
            return -self._num_tokens, 0.0  # a hit, a follower: nothing spent upstream
        tail = request.usage_tail
        if tail is None:
            tail = b"" if self._tap is None else self._tap.prev + self._tap.tail
        tokens_in, tokens_out = usage_tokens(tail)
        if tokens_in is None and tokens_out is None:
            tokens_in, tokens_out = self._estimate, 0  # no usage: the estimate stands
        num_in, num_out = tokens_in or 0, tokens_out or 0
        cost_usd = 0.0
        if self._limits.budget_usd is not None:
            model = request.model
            price = price_of(
                self._limiter.prices, model.requested, model.name, model.upstream_model
            )
            cost_usd = 0.0 if price is None else price.cost_usd(num_in, num_out)
        return num_in + num_out - self._num_tokens, cost_usd


class _Tap:
    """Wraps ``send``: adds the rate headers to the response start, keeps the last two
    body chunks (where the usage is, as ``hasten.metrics.track`` finds it)."""

    __slots__ = ("_headers", "_send", "prev", "tail")

    def __init__(self, send: Send, headers: dict[str, str]) -> None:
        self._send = send
        self._headers = [(name.encode(), value.encode()) for name, value in headers.items()]
        self.prev = self.tail = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            body: bytes = message.get("body", b"")
            if body:
                self.prev, self.tail = self.tail, body
        elif message["type"] == "http.response.start" and self._headers:
            message["headers"] = [*message["headers"], *self._headers]
        await self._send(message)

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
(``hasten.limits.shared_ledger``); without it, or while Redis is away, in this process
(``hasten.limits.ledger`` itself), exact for one gateway and per replica in a fleet. In
Redis, a request is admitted from a ticket Redis granted ahead when there is one, and its
correction sent in its key's next round trip (``hasten.limits.tickets``): no round trip on
the request path.

What counts: every admitted request counts against requests per minute. An exact-cache hit
counts against that only: it holds no upstream capacity and spends nothing, so it takes no
concurrency slot and reserves no tokens. Any other request is admitted against every limit
before the semantic lookup and the upstream call, reserving what it may use: its prompt
estimate plus its most output tokens (``max_tokens`` and its kin, else ``[limits]
default_max_output_tokens``), in tokens and, priced, of the budget. Tokens and spend count
only for a request that made the upstream call: a semantic hit or a coalesced follower
spends nothing upstream, so its reservation is refunded. The answer's usage settles it
(hasten asks the upstream for usage for such a key, and strips it from the copy of a client
that did not ask); when no usage comes (the client left, the upstream sent none), the
prompt estimate and the output tokens counted from what was forwarded are charged
(``hasten.limits.streamed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hasten.config.limits import KeyLimits
from hasten.config.limits_table import LimitsConfig
from hasten.config.prices import ModelPrice, price_of
from hasten.errors import FleetUnavailable, HastenError
from hasten.limits import ledger
from hasten.limits.estimate import estimate_prompt_tokens, max_output_tokens
from hasten.limits.headers import denial, rate_header_pairs
from hasten.limits.shared_ledger import Settlement, SharedLedger
from hasten.limits.streamed import OutputCount
from hasten.limits.tickets import Admission, TicketBook
from hasten.proxy.ports import NO_LIMIT, Limit, LimitedRequest, Spent
from hasten.values.usage import usage_tokens
from hasten.wire.asgi import Headers, Message, Send

if TYPE_CHECKING:
    from hasten.fleet.link import FleetLink

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
        settings: LimitsConfig | None = None,
        slot_lease_s: float = SLOT_LEASE_S,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or LimitsConfig()
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

    def open(self, request: LimitedRequest) -> Limit:
        """One request's limits; ``NO_LIMIT`` for a key without any."""
        caller = request.caller
        limits = caller.limits
        if limits is None or limits.is_unlimited:
            return NO_LIMIT
        return Enforcement(self, limits, caller.key_id or caller.tenant or "", request)

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
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        num_tokens: int,
        reserve_usd: float = 0.0,
    ) -> Admission:
        """Admits a request: from a pre-admitted ticket, else in Redis, else (no fleet, or
        Redis away) on this replica."""
        admission = self.take_ticket(key_id, limits, num_tokens)
        if admission is not None:
            return admission
        return await self.admit_counted(key_id, limits, request_id, num_tokens, reserve_usd)

    async def admit_counted(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        num_tokens: int,
        reserve_usd: float = 0.0,
    ) -> Admission:
        """Admits a request without a ticket, reserving ``num_tokens`` and ``reserve_usd``
        of the budget: counted in Redis, else (no fleet, or Redis away) on this replica."""
        shared = self.shared
        if shared is not None and shared.link.is_up:
            try:
                verdict = await shared.admit(
                    key_id,
                    limits,
                    request_id,
                    num_tokens,
                    self.slot_lease_ms,
                    reserve_usd=reserve_usd,
                )
            except FleetUnavailable:
                pass
            else:
                is_held = limits.max_concurrent is not None or (
                    limits.budget_usd is not None and reserve_usd > 0
                )
                if verdict.is_allowed and is_held:
                    self._hold(key_id, request_id)  # its slot, its reservation: renewed
                headers = rate_header_pairs(limits, verdict)
                return Admission(verdict, True, num_tokens, request_id, headers)
        self.num_local_admissions += 1
        book = self._ledgers.get(key_id)
        if book is None:
            book = self._ledgers[key_id] = ledger.KeyLedger()
        # A local slot needs no lease: it cannot outlive this process.
        verdict = ledger.admit(
            book, limits, self._now_ms(), request_id, num_tokens, math.inf, reserve_usd
        )
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
        ``estimate``: the tokens it asked to reserve): frees its slot and reservation,
        corrects its tokens and charges
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
        "_body",
        "_estimate",
        "_is_generating",
        "_is_hit",
        "_key_id",
        "_limiter",
        "_limits",
        "_max_output",
        "_model",
        "_num_reserved",
        "_raw_body",
        "_request_id",
        "_reserve_usd",
        "_tap",
    )

    def __init__(
        self,
        limiter: Limiter,
        limits: KeyLimits,
        key_id: str,
        request: LimitedRequest,
    ) -> None:
        self._limiter, self._limits, self._key_id = limiter, limits, key_id
        self._model, self._raw_body = request.model, request.raw_body
        self._body, self._request_id = request.body, request.request_id
        self._is_generating = request.is_generating
        self._estimate = 0  # the prompt's tokens, estimated
        self._max_output: int | None = None  # the most output tokens the request named
        self._reserve_usd = 0.0  # of the budget, reserved on admission
        self._num_reserved = 0  # tokens this request asked to reserve (its ticket may hold more)
        self._admission: Admission | None = None
        self._is_hit = False
        self._admitted_limits = limits  # what admit() counted: a hit, its request rate only
        self._tap: _Tap | None = None

    @property
    def is_reading_usage(self) -> bool:
        """Whether the answer's usage settles this request (a token limit or a budget): the
        upstream is then asked for it whatever the client asked."""
        return self._limits.tokens_per_minute is not None or self._limits.budget_usd is not None

    def wrap(self, send: Send) -> Send:
        """``send`` as the answer goes out: tapped for what it streamed when the usage
        settles this request (its output is counted should no usage come)."""
        if not self.is_reading_usage:
            return send
        tap = self._tap = _Tap(send)
        return tap.send

    async def admit(self, *, is_hit: bool) -> Headers:
        """Admits the request (a 429 when a limit says no) before any byte is answered;
        returns the rate headers its answer carries.

        A cache hit counts against the request rate only: it holds no upstream capacity and
        spends no tokens or money, so it takes no slot and reserves no tokens. Either is
        admitted from a pre-admitted ticket when one is at hand (``hasten.limits.tickets``).
        """
        limits, limiter = self._limits, self._limiter
        num_tokens = 0
        if is_hit:
            if limits.requests_per_minute is None:
                self._is_hit = True
                return []  # nothing a hit spends is limited for this key
            limits = limiter.hit_limits(limits)
        elif self.is_reading_usage:
            num_tokens = self._num_reserved = self._reserve()
        # A ticket first, without a coroutine: on a hit this is the whole of the limit's work.
        admission = limiter.take_ticket(self._key_id, limits, num_tokens)
        if admission is None:
            admission = await limiter.admit_counted(
                self._key_id, limits, self._request_id, num_tokens, self._reserve_usd
            )
            if not admission.verdict.is_allowed:
                raise denial(limits, admission.verdict, admission.num_tokens)
        self._is_hit, self._admission, self._admitted_limits = is_hit, admission, limits
        return list(admission.headers)

    def _reserve(self) -> int:
        """The tokens this request reserves (and, setting ``_reserve_usd``, its share of the
        budget): its prompt estimate plus its most output tokens. A request that names no
        most (the configured default stands in) reserves at most the whole bucket; one that
        names more than the bucket holds is too large, as OpenAI refuses it."""
        limits = self._limits
        self._estimate = estimate_prompt_tokens(self._raw_body)
        max_output = 0
        if self._is_generating:  # it generates text (embeddings do not)
            self._max_output = max_output_tokens(self._body)
            max_output = self._max_output or self._limiter.settings.default_max_output_tokens
        num_tokens = self._estimate + max_output
        tpm = limits.tokens_per_minute
        if tpm is not None and self._max_output is None and self._estimate <= tpm:
            num_tokens = min(num_tokens, tpm)
        if limits.budget_usd is not None:
            price = self._price()
            self._reserve_usd = 0.0 if price is None else price.cost_usd(self._estimate, max_output)
        return num_tokens

    def _price(self) -> ModelPrice | None:
        model = self._model
        return price_of(self._limiter.prices, model.requested, model.name, model.upstream_model)

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
            self._key_id, self._admitted_limits, admission, self._num_reserved, settlement
        )

    def _settlement(self, admission: Admission, spent: Spent) -> Settlement | None:
        """The finished miss's correction; None when there is nothing to correct or free."""
        limits = self._limits
        token_delta, cost_usd = self._spent(admission.num_tokens, spent)
        if (
            limits.max_concurrent is None
            and self._reserve_usd <= 0.0
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
            # No usage came: the prompt estimate, and what was forwarded to the client
            # (an upstream held to a max_tokens wrote no more than that).
            tokens_in = self._estimate
            tokens_out = 0 if self._tap is None else self._tap.output.num_tokens
            if self._max_output is not None:
                tokens_out = min(tokens_out, self._max_output)
        num_in, num_out = tokens_in or 0, tokens_out or 0
        cost_usd = 0.0
        if self._limits.budget_usd is not None:
            price = self._price()
            cost_usd = 0.0 if price is None else price.cost_usd(num_in, num_out)
        return num_in + num_out - num_reserved, cost_usd


class _Tap:
    """Wraps ``send`` to count the output tokens a successful answer carried
    (``hasten.limits.streamed``)."""

    __slots__ = ("_is_ok", "_send", "output")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.output = OutputCount()
        self._is_ok = False  # a 200: its bytes are checked JSON events or a JSON body

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            body: bytes = message.get("body", b"")
            if body and self._is_ok:
                self.output.feed(body)
        elif message["type"] == "http.response.start":
            self._is_ok = message["status"] == 200
        await self._send(message)

"""What the request path asks of the services above it, and the null objects it holds when
a service is off.

The pipeline sits below the services (limits, metrics, telemetry, fleet, policy, keys):
it never imports them. It declares here, as protocols, the few calls it makes, and the
gateway hands it the real objects (or the null ones) at startup. Each call gives a
service the values it reads and takes back what it decided (headers to add, a rewritten
body, a saving); no service writes into the pipeline's own records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hasten.apis.api import ParamFields
from hasten.config.tables import DEFAULT_MAX_ANSWER_BYTES
from hasten.values.caller import Caller
from hasten.values.outcome import RequestOutcome
from hasten.values.previous import PreviousResponse
from hasten.values.stage import NO_STAGE, Stage
from hasten.wire.asgi import Headers, Scope, Send

if TYPE_CHECKING:
    from hasten.proxy.flight import Flight
    from hasten.proxy.recorder import Recorder
    from hasten.routing.models import ResolvedModel
    from hasten.upstream.client import UpstreamCall


class Callers(Protocol):
    """Who sends a model request (``hasten.auth.Authenticator``)."""

    @property
    def is_enforcing(self) -> bool:
        """True with gateway keys: the caller's own key is never passed upstream."""

    async def resolve_model_caller(self, authorization: bytes | None) -> Caller:
        """The caller of a model request; raises 401 for a missing or unknown key."""


# The header a parameter policy's rewrite is named in.
POLICY_HEADER = b"x-hasten-policy"


class Rewrite(Protocol):
    """A body a parameter policy changed, and the ``x-hasten-policy`` value saying how."""

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def header(self) -> bytes: ...


class Policies(Protocol):
    """Parameter policies per route and tenant (``hasten.policy.PolicyBook``)."""

    def apply(
        self,
        body: dict[str, Any],
        endpoint: str,
        route: str,
        tenant: str,
        fields: ParamFields | None = None,
    ) -> Rewrite | None: ...


@dataclass(frozen=True, slots=True)
class Spent:
    """What a finished request used upstream, as the limits settle it."""

    is_upstream_call: bool  # False: a hit or a follower spent nothing upstream
    usage_tail: bytes  # where the answer's usage is (its body, or its stream's last events)


class LimitedRequest(Protocol):
    """What the limits read of a request (the pipeline's ``Exchange``, read only)."""

    @property
    def caller(self) -> Caller: ...

    @property
    def model(self) -> ResolvedModel: ...

    @property
    def raw_body(self) -> bytes: ...

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def request_id(self) -> str: ...

    @property
    def is_generating(self) -> bool:
        """It asks for generated text (not embeddings): output tokens may be reserved."""


class Limit(Protocol):
    """One request's limits (``hasten.limits.limiter.Enforcement``); ``NO_LIMIT`` for a key
    without any. ``admit`` once hit or miss is known, ``settle`` once, however it ended."""

    @property
    def is_reading_usage(self) -> bool:
        """Whether ``settle`` reads the answer's usage (a token limit or a budget)."""

    def wrap(self, send: Send) -> Send:
        """``send`` with what the limit reads of the answer as it goes out."""

    async def admit(self, *, is_hit: bool) -> Headers:
        """The rate headers to send; raises the 429 when a limit says no."""

    def settle(self, spent: Spent, error: BaseException | None) -> None:
        """Frees what the request held and charges what it spent; sync, so that no
        cancellation can lose it. ``error``: what ended it, given the rate headers too."""


class _NoLimit:
    __slots__ = ()

    @property
    def is_reading_usage(self) -> bool:
        return False

    def wrap(self, send: Send) -> Send:
        return send

    async def admit(self, *, is_hit: bool) -> Headers:
        return []

    def settle(self, spent: Spent, error: BaseException | None) -> None:
        return None


NO_LIMIT: Limit = _NoLimit()


class Limits(Protocol):
    """Every key's limits (``hasten.limits.limiter.Limiter``)."""

    def open(self, request: LimitedRequest) -> Limit: ...


class Savings(Protocol):
    """The latency a cache answer, a coalesced wait or a won hedge saved
    (``hasten.metrics.saved``); ``NO_SAVINGS`` with the metrics off."""

    def answer_s(
        self, model: str, num_tokens: int, waited_s: float, now_s: float
    ) -> float | None: ...

    def hedge_s(self, model: str, primary: str, elapsed_ms: float) -> float | None: ...

    def coalesced_s(self, model: str, outcome: RequestOutcome) -> float | None: ...


class _NoSavings:
    __slots__ = ()

    def answer_s(self, model: str, num_tokens: int, waited_s: float, now_s: float) -> None:
        return None

    def hedge_s(self, model: str, primary: str, elapsed_ms: float) -> None:
        return None

    def coalesced_s(self, model: str, outcome: RequestOutcome) -> None:
        return None


NO_SAVINGS: Savings = _NoSavings()


class Tracer(Protocol):
    """Starts each request's root span (``hasten.telemetry.tracing.Tracing``)."""

    @property
    def is_enabled(self) -> bool: ...

    def start_request(self, scope: Scope, endpoint: str, request_id: str) -> Stage: ...


class _NoTracer:
    __slots__ = ()

    @property
    def is_enabled(self) -> bool:
        return False

    def start_request(self, scope: Scope, endpoint: str, request_id: str) -> Stage:
        return NO_STAGE


NO_TRACER: Tracer = _NoTracer()


@dataclass(frozen=True, slots=True)
class FleetJob:
    """What the fleet needs of one cacheable request's flight."""

    flight_key: str
    pump: Callable[[Flight], Awaitable[None]]  # the local leader: upstream into the flight
    open: Callable[[], Awaitable[UpstreamCall]]
    recorder: Recorder | None
    commit: Callable[[], None] | None  # the leader's store (every tier)
    is_sse: bool  # the upstream answers as an event stream
    endpoint: str  # "chat" or "completions": how a splice reads the answer's text
    # False (``x-hasten-idempotent: false``): a lost leader's call may have run, so a
    # follower ends with an error rather than run the request a second time.
    is_idempotent: bool = True
    # What a follower holds of the relayed answer at most (the route's max_answer_bytes).
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES


class EarlyAsk(Protocol):
    """A flight's lease asked for at the request's L1 miss, before the request knows it
    will call upstream (``hasten.fleet.coalesce.EarlyLease``)."""

    def ask(self) -> None: ...


class FleetFlights(Protocol):
    """Coalescing across replicas (``hasten.fleet.coalesce.FleetCoalescer``); with the
    fleet off, ``NO_FLEET`` runs every flight on this replica."""

    @property
    def is_on(self) -> bool: ...

    def early(self, flight_key: str) -> EarlyAsk: ...

    def release(self, early: EarlyAsk) -> None: ...

    async def pump(self, flight: Flight, job: FleetJob, early: EarlyAsk | None) -> None: ...


class _NoAsk:
    __slots__ = ()

    def ask(self) -> None:
        return None


class _NoFleet:
    __slots__ = ()

    @property
    def is_on(self) -> bool:
        return False

    def early(self, flight_key: str) -> EarlyAsk:
        return _NoAsk()

    def release(self, early: EarlyAsk) -> None:
        return None

    async def pump(self, flight: Flight, job: FleetJob, early: EarlyAsk | None) -> None:
        await job.pump(flight)


NO_FLEET: FleetFlights = _NoFleet()


class KeptAnswer(Protocol):
    """What keeps one request's answer (``hasten.responses``: a stored Responses answer is
    written before its end reaches the client), and the previous response it continues."""

    @property
    def previous(self) -> PreviousResponse | None:
        """The ``previous_response_id`` expanded into the request, if any: the attempt to
        the deployment holding it may send the id instead (``hasten.upstream.bridge``)."""

    def wrap(self, send: Send, body: Mapping[str, Any]) -> Send:
        """``send`` for the answer to ``body`` (the request as parsed and checked): itself
        when there is nothing to keep of it."""


class _NotKept:
    __slots__ = ()

    previous = None

    def wrap(self, send: Send, body: Mapping[str, Any]) -> Send:
        return send


NOT_KEPT: KeptAnswer = _NotKept()


class ResponseStates(Protocol):
    """The Responses API's stored responses (``hasten.responses.state.ResponseState``)."""

    async def open(self, api: str, tenant: str, raw: bytes) -> tuple[bytes, KeptAnswer]:
        """The body as it goes on (a ``previous_response_id``'s conversation expanded into
        its input) and what keeps its answer; raises the 404 for a previous response the
        tenant does not hold. Any API but Responses: ``raw`` and ``NOT_KEPT``."""


class _NoStates:
    __slots__ = ()

    async def open(self, api: str, tenant: str, raw: bytes) -> tuple[bytes, KeptAnswer]:
        return raw, NOT_KEPT


NO_STATES: ResponseStates = _NoStates()

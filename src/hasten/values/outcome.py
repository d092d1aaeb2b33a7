"""The per-request seam: one ``RequestOutcome`` per answered completion or embeddings request.

The proxy builds it once, when the response has finished (sent whole, failed, or the client
left), and hands it to every observer on ``Gateway.observers``, synchronously: observers
must be cheap (a few dict lookups and increments), as they run on the request path. The
Prometheus ``Metrics`` is one observer; the live dashboard keeps a rolling window of them.

All durations are seconds from ``time.perf_counter`` differences, measured on the gateway
side of the client's connection: ``ttft_s`` and ``e2e_s`` are what the client saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The cache outcome label: how the answer was produced.
HIT = "hit"  # exact cache (L1 or L2)
SEMANTIC = "semantic"  # a semantic-tier match
COALESCED = "coalesced"  # joined an identical request's upstream call
MISS = "miss"  # looked up, not found, fetched from upstream
BYPASS = "bypass"  # not cacheable, fetched from upstream
CACHE_OUTCOMES = (HIT, SEMANTIC, COALESCED, MISS, BYPASS)

# ``status`` of a request whose client left before the response ended (nginx's convention).
CLIENT_GONE_STATUS = 499


@dataclass(slots=True)
class RequestOutcome:
    """How one request went, with the breakdown of where its time went."""

    request_id: str
    endpoint: str  # "chat/completions", "completions", "embeddings"
    tenant: str
    model: str  # the name the client asked for
    deployment: str | None  # the upstream that answered; None for a cache answer
    cache: str  # one of CACHE_OUTCOMES
    status: int  # the HTTP status sent (CLIENT_GONE_STATUS if none could be)
    error_code: str | None  # the OpenAI-shaped error code, also for an error ending a stream
    is_stream: bool
    started_s: float  # perf_counter when the request reached the proxy
    ttft_s: float | None  # to the first body byte sent; None when none was sent
    e2e_s: float  # to the last byte sent (or the failure)
    upstream_ttfb_s: float | None  # the upstream's time to first byte; None without a call
    gateway_s: float  # hasten's own share: to the response start, less the upstream's TTFB
    num_gaps: int = 0  # inter-chunk gaps of a stream (chunks sent - 1)
    gap_sum_s: float = 0.0
    gap_max_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)  # each gap, for the histogram
    tokens_in: int | None = None  # from the answer's usage, when it carried one
    tokens_out: int | None = None
    saved_s: float | None = None  # estimated upstream latency avoided (hasten.metrics.saved)
    is_upstream_call: bool = False  # this request made (led) an upstream call
    hedge: str = ""  # "", "won", "lost", "denied"
    failovers: tuple[str, ...] = ()  # "deployment=reason" per failed attempt, in order
    semantic_s: float | None = None  # the semantic lookup (embedding and search)
    ended_at: float = 0.0  # wall clock (``time.time()``) when it was reported, for display
    resume: str = ""  # how a broken stream was continued: "" (it was not), or one of
    # hasten.proxy.continuation.RESUME_OUTCOMES; set on the request that made the call


Observer = Callable[[RequestOutcome], None]

# Set in the ASGI scope once a request's outcome is reported: the app then leaves the
# error count of that request to the observers, so no error is counted twice.
OBSERVED_SCOPE_KEY = "hasten.observed"

"""What the probes measured, raw: every time in ms from the moment the request was sent.

The one interface between the probes (doing) and the analysis (deciding): the analysis is
tested by building these by hand.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """One streamed completion as the client saw it."""

    headers_ms: float
    # Arrival of each event that carried text; events of one network read share a time.
    content_arrivals_ms: tuple[float, ...]
    end_ms: float
    # usage.completion_tokens when the server reported it, else None (then events count).
    num_completion_tokens: int | None = None
    is_event_stream: bool = True

    @property
    def ttft_ms(self) -> float | None:
        return self.content_arrivals_ms[0] if self.content_arrivals_ms else None

    @property
    def num_tokens(self) -> int:
        if self.num_completion_tokens is not None:
            return self.num_completion_tokens
        return len(self.content_arrivals_ms)


@dataclass(frozen=True, slots=True)
class WholeTiming:
    """One non-streamed completion: the answer arrives in one piece."""

    headers_ms: float
    end_ms: float
    num_completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ProbeTimings:
    """Everything one doctor run measured about one endpoint."""

    base_url: str
    host: str
    port: int
    is_tls: bool
    model: str
    max_tokens: int
    dns_ms: float | None  # None: the host is an IP literal, nothing to resolve
    connect_ms: tuple[float, ...]  # TCP handshakes, fresh connection each
    tls_ms: tuple[float, ...]  # TLS handshakes after those connects (empty for http)
    # Time to response headers of a request the server answers without generating, on a
    # warm connection: the round trip as the request path pays it.
    round_trip_ms: tuple[float, ...]
    round_trip_method: str
    streams: tuple[StreamTiming, ...]
    wholes: tuple[WholeTiming, ...]
    cache_cold: StreamTiming | None = None
    cache_repeats: tuple[StreamTiming, ...] = ()

"""Everything one load run needs to know, validated up front."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hasten.loadgen.compat import DEFAULT_PERCENTILES
from hasten.loadgen.payload import Endpoint
from hasten.loadgen.slo import SLO_METRICS
from hasten.loadgen.workload import WorkloadSpec

Arrival = Literal["poisson", "fixed"]

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_MODEL = "sim-model"
DEFAULT_NUM_REQUESTS = 100


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """One load run.

    Closed loop (``rate_rps`` None): ``concurrency`` workers each send back to back.
    Open loop (``rate_rps`` set): requests start on a Poisson or fixed schedule regardless of
    replies; ``concurrency``, when set, caps connections in flight (queued requests keep
    their scheduled start, so queueing shows up in latency instead of being hidden).
    The run stops at ``num_requests`` or ``duration_s``, whichever comes first; the first
    ``num_warmup`` requests run before it and are left out of every figure.
    """

    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    endpoint: Endpoint = "chat"
    stream: bool = False
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    temperature: float | None = 0.0
    max_tokens: int | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: Arrival = "poisson"
    num_requests: int | None = DEFAULT_NUM_REQUESTS
    duration_s: float | None = None
    num_warmup: int = 0
    timeout_s: float = 60.0
    seed: int = 0
    keep_samples: bool = False
    # Reporting only: vLLM-style percentiles (in percent) and goodput objectives (ms).
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    goodput_ms: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.endpoint not in ("chat", "completions"):
            raise ValueError(f"unknown endpoint {self.endpoint!r}")
        if self.arrival not in ("poisson", "fixed"):
            raise ValueError(f"unknown arrival process {self.arrival!r}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.rate_rps is not None and self.rate_rps <= 0:
            raise ValueError("rate must be positive")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("bound the run with num_requests, duration_s, or both")
        if self.num_requests is not None and self.num_requests < 0:
            raise ValueError("num_requests must not be negative")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration_s must be positive")
        if self.num_warmup < 0:
            raise ValueError("num_warmup must not be negative")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not all(0 < percent <= 100 for percent in self.percentiles):
            raise ValueError("percentiles must be within (0, 100]")
        if not set(self.goodput_ms) <= set(SLO_METRICS):
            raise ValueError(f"goodput objectives must be among {SLO_METRICS}")

    @property
    def is_open_loop(self) -> bool:
        return self.rate_rps is not None

    @property
    def num_workers(self) -> int:
        """Closed-loop workers (and warmup workers in either mode)."""
        return self.concurrency or 1

    @property
    def connection_limit(self) -> int:
        """aiohttp connector limit; 0 is unlimited, for an uncapped open loop."""
        if self.is_open_loop:
            return self.concurrency or 0
        return self.num_workers

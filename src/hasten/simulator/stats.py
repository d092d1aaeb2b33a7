"""Counters the simulator keeps so tests and benchmarks can see what actually reached it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum


class Outcome(Enum):
    """How one API request ended, from the simulator's point of view."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"  # the client went away before the response was finished
    SERVER_ERROR = "server_error"  # injected 500, up front or as a mid-stream error event
    RATE_LIMITED = "rate_limited"  # injected 429
    DISCONNECTED = "disconnected"  # injected connection abort
    STALLED = "stalled"  # injected silence (silent, hang) until the client gave up
    CORRUPTED = "corrupted"  # injected malformed or truncated body
    BAD_REQUEST = "bad_request"  # 4xx for malformed input, unknown path or model


@dataclass(slots=True)
class SimStats:
    num_requests: int = 0
    num_requests_by_endpoint: dict[str, int] = field(default_factory=dict)
    num_stream_requests: int = 0
    num_completed: int = 0
    num_cancelled: int = 0
    num_errors_injected: int = 0
    num_rate_limited: int = 0
    num_disconnects: int = 0
    num_stalls: int = 0
    num_corrupted: int = 0
    num_bad_requests: int = 0
    num_in_flight: int = 0
    num_prompt_tokens: int = 0
    num_prefix_cache_hit_tokens: int = 0
    num_completion_tokens: int = 0
    num_embedding_inputs: int = 0
    num_embedding_tokens: int = 0
    num_stragglers: int = 0  # requests whose latency plan drew a straggler

    def record_request(self, endpoint: str) -> None:
        self.num_requests += 1
        self.num_in_flight += 1
        by_endpoint = self.num_requests_by_endpoint
        by_endpoint[endpoint] = by_endpoint.get(endpoint, 0) + 1

    def record_outcome(self, outcome: Outcome) -> None:
        self.num_in_flight -= 1
        if outcome is Outcome.COMPLETED:
            self.num_completed += 1
        elif outcome is Outcome.CANCELLED:
            self.num_cancelled += 1
        elif outcome is Outcome.SERVER_ERROR:
            self.num_errors_injected += 1
        elif outcome is Outcome.RATE_LIMITED:
            self.num_rate_limited += 1
        elif outcome is Outcome.DISCONNECTED:
            self.num_disconnects += 1
        elif outcome is Outcome.STALLED:
            self.num_stalls += 1
        elif outcome is Outcome.CORRUPTED:
            self.num_corrupted += 1
        else:
            self.num_bad_requests += 1

    @property
    def prefix_cache_hit_ratio(self) -> float:
        """Share of chat/completion prompt tokens served from the prefix cache."""
        if self.num_prompt_tokens == 0:
            return 0.0
        return self.num_prefix_cache_hit_tokens / self.num_prompt_tokens

    def reset(self) -> None:
        """Zeroes every counter except in-flight, which tracks requests still running."""
        num_in_flight = self.num_in_flight
        fresh = SimStats()
        for item in fields(self):
            setattr(self, item.name, getattr(fresh, item.name))
        self.num_in_flight = num_in_flight

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {item.name: getattr(self, item.name) for item in fields(self)}
        data["num_requests_by_endpoint"] = dict(self.num_requests_by_endpoint)
        data["prefix_cache_hit_ratio"] = self.prefix_cache_hit_ratio
        return data

"""A circuit breaker per deployment: closed, open (cooling down), half-open (probing).

Trips on ``max_consecutive_failures`` in a row, or when the recent window holds at least
``min_requests`` outcomes of which ``error_rate`` failed, or at once when the upstream
asks for a pause (a 429 with Retry-After). Each trip in a row doubles the cooldown up to
``max_cooldown_s``; Retry-After lengthens it. After the cooldown a few probe requests are
let through; one success closes the breaker, a failure opens it again.
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum

from hasten.config.routing import BreakerConfig

# The longest pause a Retry-After can impose on a deployment: an upstream (or whatever sits
# in front of it) asking for a day must not take it out of the rotation until a restart.
MAX_RETRY_AFTER_PAUSE_S = 3600.0


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(self, config: BreakerConfig) -> None:
        self._config = config
        self._outcomes: deque[bool] = deque(maxlen=config.window_size)  # True: failed
        self.num_consecutive_failures = 0
        self.num_trips = 0  # trips in a row, without a success in between
        self.num_trips_total = 0
        self.reopen_at_s = 0.0
        self._is_open = False
        self.num_probes_in_flight = 0
        self.last_trip_reason = ""
        self.num_remote_trips = 0  # trips another replica saw, applied here

    def state(self, now_s: float) -> BreakerState:
        if not self._is_open:
            return BreakerState.CLOSED
        return BreakerState.OPEN if now_s < self.reopen_at_s else BreakerState.HALF_OPEN

    def is_available(self, now_s: float) -> bool:
        state = self.state(now_s)
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN:
            return False
        return self.num_probes_in_flight < self._config.num_half_open_probes

    def on_attempt(self, now_s: float) -> bool:
        """Registers an attempt; True when it is a half-open probe (to be reported back)."""
        if self.state(now_s) is BreakerState.CLOSED:
            return False
        self.num_probes_in_flight += 1
        return True

    def release_probe(self, is_probe: bool) -> None:
        if is_probe:
            self.num_probes_in_flight = max(0, self.num_probes_in_flight - 1)

    def record_success(self, now_s: float, *, is_probe: bool) -> None:
        self.release_probe(is_probe)
        self._outcomes.append(False)
        self.num_consecutive_failures = 0
        if self._is_open and self.state(now_s) is BreakerState.HALF_OPEN:
            self._is_open = False
            self.num_trips = 0
            self._outcomes.clear()
        elif not self._is_open:
            self.num_trips = 0

    def record_failure(
        self, now_s: float, *, is_probe: bool, reason: str, retry_after_s: float | None = None
    ) -> None:
        self.release_probe(is_probe)
        self._outcomes.append(True)
        self.num_consecutive_failures += 1
        if retry_after_s is not None:
            retry_after_s = min(retry_after_s, MAX_RETRY_AFTER_PAUSE_S)
        state = self.state(now_s)
        if state is BreakerState.OPEN:
            # Late results of requests sent before the trip must not extend the cooldown,
            # but an explicit Retry-After still does.
            if retry_after_s:
                self.reopen_at_s = max(self.reopen_at_s, now_s + retry_after_s)
            return
        if state is BreakerState.HALF_OPEN:
            self._trip(now_s, f"half-open probe failed: {reason}", retry_after_s)
        elif retry_after_s:
            self._trip(now_s, f"{reason} with Retry-After {retry_after_s:g} s", retry_after_s)
        elif self.num_consecutive_failures >= self._config.max_consecutive_failures:
            self._trip(now_s, f"{self.num_consecutive_failures} consecutive failures ({reason})")
        elif self._is_error_rate_exceeded():
            self._trip(now_s, f"error rate over {self._config.error_rate:.0%} ({reason})")

    def _is_error_rate_exceeded(self) -> bool:
        num = len(self._outcomes)
        if num < self._config.min_requests:
            return False
        return sum(self._outcomes) / num >= self._config.error_rate

    def _trip(self, now_s: float, reason: str, retry_after_s: float | None = None) -> None:
        config = self._config
        cooldown_s = min(config.max_cooldown_s, config.cooldown_s * (2.0**self.num_trips))
        if retry_after_s:
            cooldown_s = max(cooldown_s, retry_after_s)
        self._is_open = True
        self.reopen_at_s = now_s + cooldown_s
        self.num_trips += 1
        self.num_trips_total += 1
        self.last_trip_reason = reason

    def apply_remote_trip(
        self, reopen_at_s: float, num_trips: int, reason: str, now_s: float
    ) -> bool:
        """Opens the breaker until ``reopen_at_s`` because another replica tripped it.

        True when it changed anything: a trip already over, or one this breaker is already
        open past, is ignored. The trips-in-a-row count is the larger of the two, so a
        failed half-open probe here backs off as long as it would at the replica that tripped.
        """
        if reopen_at_s <= now_s or (self._is_open and self.reopen_at_s >= reopen_at_s):
            return False
        self._is_open = True
        self.reopen_at_s = reopen_at_s
        self.num_trips = max(self.num_trips, num_trips)
        self.num_remote_trips += 1
        self.last_trip_reason = f"fleet: {reason}"
        return True

    def badness(self, now_s: float) -> tuple[float, int]:
        """Orders tripped deployments: the one closest to reopening, fewest failures, first."""
        return (max(0.0, self.reopen_at_s - now_s), self.num_consecutive_failures)

    def snapshot(self, now_s: float) -> dict[str, object]:
        num = len(self._outcomes)
        return {
            "state": self.state(now_s).value,
            "consecutive_failures": self.num_consecutive_failures,
            "window_error_rate": round(sum(self._outcomes) / num, 4) if num else 0.0,
            "reopens_in_s": round(max(0.0, self.reopen_at_s - now_s), 3) if self._is_open else 0,
            "trips": self.num_trips_total,
            "remote_trips": self.num_remote_trips,
            "last_trip_reason": self.last_trip_reason,
        }

"""What a replica shares of its routing state with the fleet, and in what form.

A replica publishes only what it saw itself: TTFT samples, censored waits (attempts given up
without a token), time-per-token samples and breaker trips, gathered in the pool's ``Outbox`` as
they happen and drained once per sync. Another replica folds them in through the same
estimators its own requests feed (``merge_remote``),
so its view is as if it had served the fleet's requests itself. What was folded in is never
published again, which is what keeps a replica's data from being counted twice.

Samples rather than a summary with a weight: the estimators are built for a stream of
samples (the EWMA's time weighting, the corroborated-slowness evidence, the hedge quantiles),
and any summary would have to be re-derived for each of them. At a high request rate the
outbox keeps the newest ``MAX_PENDING`` observations per sync, which is still far more than
the ~16 samples a level shift takes to learn.

Times are the local monotonic clock; the fleet module shifts them to and from a clock every
replica shares as it encodes and decodes them (``hasten.fleet.news``). The hedge budget's
counts are shared separately, as fleet totals (``HedgeBudget.take_counts`` / ``apply_fleet``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

MAX_PENDING = 512  # observations kept between two syncs (the newest win)


class ObservationKind(StrEnum):
    TTFT = "t"  # a first token after value_ms
    CENSORED = "c"  # an attempt given up after value_ms without a token
    TPOT = "p"  # time per output token of a finished stream


@dataclass(frozen=True, slots=True)
class Observation:
    deployment: str
    kind: ObservationKind
    value_ms: float
    at_s: float


@dataclass(frozen=True, slots=True)
class Trip:
    """A breaker trip: the deployment is closed to traffic until ``reopen_at_s``."""

    deployment: str
    reopen_at_s: float
    num_trips: int  # trips in a row at the replica that tripped (sets the next cooldown)
    reason: str


@dataclass(frozen=True, slots=True)
class Summary:
    """One replica's news for one pool since its last sync."""

    observations: tuple[Observation, ...] = ()
    trips: tuple[Trip, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.observations and not self.trips

    def shifted(self, delta_s: float) -> Summary:
        """The same news on another clock: every time plus ``delta_s``."""
        return Summary(
            tuple(
                Observation(o.deployment, o.kind, o.value_ms, o.at_s + delta_s)
                for o in self.observations
            ),
            tuple(
                Trip(t.deployment, t.reopen_at_s + delta_s, t.num_trips, t.reason)
                for t in self.trips
            ),
        )


def _nothing() -> None:
    return None


class Outbox:
    """A pool's own observations and trips waiting for the next sync.

    ``on_trip`` is called on every local trip so the sync can publish it at once rather
    than at its next tick (it must not block: the fleet module sets an event).
    """

    def __init__(self, on_trip: Callable[[], None] = _nothing) -> None:
        self._observations: deque[Observation] = deque(maxlen=MAX_PENDING)
        self._trips: dict[str, Trip] = {}  # the latest per deployment: bounded while away
        self._on_trip = on_trip
        self.num_dropped = 0  # observations pushed out by newer ones before a sync

    def observe(self, deployment: str, kind: ObservationKind, value_ms: float, at_s: float) -> None:
        if len(self._observations) == MAX_PENDING:
            self.num_dropped += 1
        self._observations.append(Observation(deployment, kind, value_ms, at_s))

    def trip(self, trip: Trip) -> None:
        self._trips[trip.deployment] = trip
        self._on_trip()

    def restore(self, summary: Summary) -> None:
        """Puts back news a failed sync could not send, before anything newer (trips only
        where no newer trip of the deployment has come since)."""
        newer = list(self._observations)
        self._observations.clear()
        self._observations.extend(summary.observations)
        self._observations.extend(newer)  # past MAX_PENDING the oldest fall out
        for trip in summary.trips:
            self._trips.setdefault(trip.deployment, trip)

    def drain(self) -> Summary:
        summary = Summary(tuple(self._observations), tuple(self._trips.values()))
        self._observations.clear()
        self._trips.clear()
        return summary

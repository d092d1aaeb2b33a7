"""The wire form of a replica's routing news (``hasten.routing.shared.Summary``): compact JSON.

One entry of the fleet's news stream carries one replica's summaries of every pool that had
news, by route name. Times are on Redis's clock, in milliseconds: each replica shifts its
monotonic times by its own estimate of that clock (see ``hasten.fleet.routing``), so no two
replicas ever compare their wall clocks. Decoding is defensive: a malformed entry (another
version, a stray writer) is skipped whole, never half applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from hasten.errors import MalformedNews
from hasten.routing.shared import Observation, ObservationKind, Summary, Trip

MAX_REASON_CHARS = 200


def encode(summaries: Mapping[str, Summary]) -> bytes:
    """Summaries by route name, their times already on Redis's clock (seconds)."""
    return orjson.dumps({route: _encode_summary(s) for route, s in summaries.items()})


def _encode_summary(summary: Summary) -> dict[str, Any]:
    return {
        "o": [
            [o.deployment, o.kind.value, round(o.value_ms, 3), round(o.at_s * 1000.0, 3)]
            for o in summary.observations
        ],
        "t": [
            [t.deployment, round(t.reopen_at_s * 1000.0, 3), t.num_trips, t.reason]
            for t in summary.trips
        ],
    }


def decode(raw: bytes) -> dict[str, Summary]:
    """The summaries of one entry (times in seconds on Redis's clock); ``MalformedNews``."""
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise MalformedNews("not an object")
        return {str(route): _decode_summary(value) for route, value in data.items()}
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise MalformedNews(str(exc)) from exc


def _decode_summary(value: Any) -> Summary:
    observations = tuple(
        Observation(str(name), ObservationKind(kind), _number(value_ms), _number(at_ms) / 1000.0)
        for name, kind, value_ms, at_ms in value["o"]
    )
    trips = tuple(
        Trip(str(name), _number(reopen_ms) / 1000.0, int(num), str(reason)[:MAX_REASON_CHARS])
        for name, reopen_ms, num, reason in value["t"]
    )
    return Summary(observations, trips)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)

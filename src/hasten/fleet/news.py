"""The wire form of a replica's routing news (``hasten.routing.outbox.Summary``): compact JSON.

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
from hasten.routing.outbox import Observation, ObservationKind, Summary, Trip

MAX_REASON_CHARS = 200


def encode(summaries: Mapping[str, Summary], shift_s: float = 0.0) -> bytes:
    """Summaries by route name, every time plus ``shift_s`` (onto Redis's clock)."""
    return orjson.dumps({route: _encode_summary(s, shift_s) for route, s in summaries.items()})


def _encode_summary(summary: Summary, shift_s: float) -> dict[str, Any]:
    return {
        "o": [
            [o.deployment, o.kind.value, round(o.value_ms, 3), round((o.at_s + shift_s) * 1e3, 3)]
            for o in summary.observations
        ],
        "t": [
            [t.deployment, round((t.reopen_at_s + shift_s) * 1e3, 3), t.num_trips, t.reason]
            for t in summary.trips
        ],
    }


def decode(raw: bytes, shift_s: float = 0.0) -> dict[str, Summary]:
    """The summaries of one entry, every time plus ``shift_s`` (off Redis's clock, onto the
    reader's); ``MalformedNews`` when any part of it is unreadable."""
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise MalformedNews("not an object")
        return {str(route): _decode_summary(value, shift_s) for route, value in data.items()}
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise MalformedNews(str(exc)) from exc


def _decode_summary(value: Any, shift_s: float) -> Summary:
    observations = tuple(
        Observation(str(name), ObservationKind(kind), _number(value_ms), _seconds(at_ms, shift_s))
        for name, kind, value_ms, at_ms in value["o"]
    )
    trips = tuple(
        Trip(str(name), _seconds(reopen_ms, shift_s), int(num), str(reason)[:MAX_REASON_CHARS])
        for name, reopen_ms, num, reason in value["t"]
    )
    return Summary(observations, trips)


def _seconds(ms: Any, shift_s: float) -> float:
    return _number(ms) / 1e3 + shift_s


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)

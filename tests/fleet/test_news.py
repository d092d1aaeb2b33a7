"""The wire form of routing news: a round trip, and malformed entries refused whole."""

from __future__ import annotations

import pytest

from hasten.errors import MalformedNews
from hasten.fleet.news import MAX_REASON_CHARS, decode, encode
from hasten.routing.outbox import Observation, ObservationKind, Summary, Trip


def test_summaries_survive_the_wire() -> None:
    summary = Summary(
        (
            Observation("a", ObservationKind.TTFT, 12.5, 1_700_000_000.125),
            Observation("b", ObservationKind.CENSORED, 300.0, 1_700_000_000.5),
            Observation("a", ObservationKind.TPOT, 4.25, 1_700_000_001.0),
        ),
        (Trip("b", 1_700_000_030.0, 2, "3 consecutive failures (500)"),),
    )
    assert decode(encode({"m": summary, "other": Summary()})) == {
        "m": summary,
        "other": Summary(),
    }


def test_a_long_reason_is_cut() -> None:
    raw = encode({"m": Summary(trips=(Trip("b", 1.0, 1, "x" * 1000),))})
    assert len(decode(raw)["m"].trips[0].reason) == MAX_REASON_CHARS


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"m": []}',
        b'{"m": {"o": [["a", "t", 1.0]], "t": []}}',
        b'{"m": {"o": [["a", "?", 1.0, 2.0]], "t": []}}',
        b'{"m": {"o": [["a", "t", "slow", 2.0]], "t": []}}',
        b'{"m": {"o": [["a", "t", true, 2.0]], "t": []}}',
        b'{"m": {"o": [], "t": [["b", 1.0, "two", "r"]]}}',
        b'{"m": {"o": []}}',
    ],
)
def test_malformed_news_is_refused_whole(raw: bytes) -> None:
    with pytest.raises(MalformedNews):
        decode(raw)


def test_times_move_onto_the_shared_clock_and_back() -> None:
    summary = Summary(
        (Observation("a", ObservationKind.TTFT, 12.5, 10.25),), (Trip("b", 40.5, 1, "r"),)
    )
    on_redis = decode(encode({"m": summary}, 1_700_000_000.0))["m"]
    assert on_redis.observations[0].at_s == 1_700_000_010.25
    assert on_redis.trips[0].reopen_at_s == 1_700_000_040.5
    assert decode(encode({"m": summary}, 1_700_000_000.0), -1_700_000_000.0)["m"] == summary

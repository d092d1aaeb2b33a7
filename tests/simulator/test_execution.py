"""Loopback tests of the faults the simulator carries out: silence, a hang after headers,
malformed and truncated bodies, and 5xx bursts (``/sim/burst``), seen as a client sees them.

Silence is observed through a client timeout that ends the wait, never a duration assert.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from hasten.simulator import SimConfig, build_app
from hasten.simulator.execution import MALFORMED_EVENT
from tests.support.servers import ServerThread

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(output_tokens=8))) as srv:
        yield srv


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        client.post("/sim/reset").raise_for_status()
        yield client


def stats_when(http: httpx.Client, **expected: int) -> dict[str, Any]:
    """The counters once they match (a disconnect is noticed asynchronously), bounded."""
    data: dict[str, Any] = {}
    for _ in range(200):
        data = http.get("/sim/stats").json()
        if all(data[name] == value for name, value in expected.items()):
            return data
        time.sleep(0.01)
    raise AssertionError(f"stats never matched {expected}: {data}")


def data_lines(raw: bytes) -> list[bytes]:
    return [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]


def test_silent_reads_the_request_and_never_answers(http: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        http.post(
            "/v1/chat/completions", json=STREAM, headers={"x-sim-fail": "silent"}, timeout=0.3
        )
    assert stats_when(http, num_stalls=1, num_in_flight=0)["num_completed"] == 0


def test_hang_sends_the_headers_then_nothing(http: httpx.Client) -> None:
    for body in (STREAM, CHAT):
        with http.stream(
            "POST",
            "/v1/chat/completions",
            json=body,
            headers={"x-sim-fail": "hang"},
            timeout=0.3,
        ) as response:
            assert response.status_code == 200
            expected_type = "text/event-stream" if body is STREAM else "application/json"
            assert response.headers["content-type"].startswith(expected_type)
            with pytest.raises(httpx.ReadTimeout):
                response.read()
    assert stats_when(http, num_stalls=2, num_in_flight=0)["num_completed"] == 0


def test_malformed_puts_one_event_that_is_not_json_in_an_otherwise_whole_stream(
    http: httpx.Client,
) -> None:
    clean = http.post("/v1/chat/completions", json=STREAM).content
    headers = {"x-sim-fail": "malformed", "x-sim-fail-after-chunks": "3"}
    bad = http.post("/v1/chat/completions", json=STREAM, headers=headers).content
    lines = data_lines(bad)
    assert lines[3] == MALFORMED_EVENT[6:].strip()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(lines[3])
    assert len(lines) == len(data_lines(clean)) + 1 and lines[-1] == b"[DONE]"
    assert stats_when(http, num_corrupted=1)["num_completed"] == 1


def test_truncate_ends_a_stream_cleanly_halfway_through_an_event(http: httpx.Client) -> None:
    headers = {"x-sim-fail": "truncate", "x-sim-fail-after-chunks": "2"}
    raw = http.post("/v1/chat/completions", json=STREAM, headers=headers).content
    events = raw.split(b"\n\n")
    assert len(events) == 3 and events[2].startswith(b"data: {")  # two whole, one half
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(events[2][6:])
    assert stats_when(http, num_corrupted=1)["num_corrupted"] == 1


def test_whole_bodies_are_cut_mid_json_or_not_json(http: httpx.Client) -> None:
    for kind in ("truncate", "malformed"):
        response = http.post("/v1/chat/completions", json=CHAT, headers={"x-sim-fail": kind})
        assert response.status_code == 200  # complete by HTTP: Content-Length matches
        assert int(response.headers["content-length"]) == len(response.content)
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(response.content)
    assert stats_when(http, num_corrupted=2)["num_completed"] == 0


def test_a_burst_fails_the_next_requests_then_recovers(http: httpx.Client) -> None:
    armed = http.post("/sim/burst", json={"num_requests": 2, "status": 503})
    assert armed.json() == {"num_requests": 2, "status": 503}
    statuses = [http.post("/v1/chat/completions", json=CHAT).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
    error = http.post("/sim/burst", json={"num_requests": 1}).json()
    assert error["status"] == 500
    body = http.post("/v1/chat/completions", json=CHAT).json()
    assert body["error"]["type"] == "server_error"
    assert stats_when(http, num_errors_injected=3)["num_completed"] == 2


def test_reset_ends_a_burst(http: httpx.Client) -> None:
    http.post("/sim/burst", json={"num_requests": 5}).raise_for_status()
    http.post("/sim/reset").raise_for_status()
    assert http.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"num_requests": -1},
        {"num_requests": True},
        {"status": 503},
        {"num_requests": 1, "status": 429},
        {"num_requests": 1, "extra": 1},
    ],
)
def test_a_bad_burst_is_a_400(http: httpx.Client, body: dict[str, Any]) -> None:
    response = http.post("/sim/burst", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"

"""``GET /stats`` counts the gateway's asyncio tasks (bench/reliability/soak.py watches it for
leaks)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread

MAX_WAIT_S = 20.0


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[ServerThread]:
    # Slow enough that a stream is still open when /stats is read.
    with ServerThread(build_sim(SimConfig(decode_ms_per_token=200.0))) as server:
        yield server


def num_tasks(url: str) -> int:
    tasks = httpx.get(url + "/stats", timeout=10).json()["tasks"]
    assert isinstance(tasks, int)
    return tasks


def test_stats_counts_tasks_of_a_request_in_flight_and_drops_them_after(
    slow_sim: ServerThread,
) -> None:
    with running_gateway(make_config({"sim": slow_sim.url + "/v1"})) as gateway:
        idle = num_tasks(gateway.url)
        assert idle >= 1  # at least the task serving /stats itself
        body = chat_body("a long stream", stream=True)
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", gateway.url + "/v1/chat/completions", json=body) as stream,
        ):
            lines = stream.iter_lines()  # kept: a collected iterator closes the response
            assert next(lines).startswith("data: ")  # the stream has started
            assert num_tasks(gateway.url) > idle
        # The client left mid-stream: the gateway's tasks for it end.
        deadline = time.monotonic() + MAX_WAIT_S
        while num_tasks(gateway.url) > idle:
            assert time.monotonic() < deadline, "tasks of a finished request stayed alive"
            time.sleep(0.05)

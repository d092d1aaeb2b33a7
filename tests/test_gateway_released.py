"""Nothing of a finished request outlives it (issue 41, defect 2): with the cycle collector
off, the memory a timed-out upstream read held is freed when the request ends, by reference
counting alone. Three timed-out requests used to leave gigabytes until a ``gc.collect()``.

The gateway runs in this process (a thread) so tracemalloc sees its allocations; each
request below holds ~4 MiB of upstream bytes when its total timeout fires.
"""

from __future__ import annotations

import gc
import http.client
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from hasten.config import TimeoutConfig
from tests.support.gateway import make_config, running_gateway
from tests.support.hostile import HostileUpstream
from tests.support.servers import ServerThread

MIB = 1024 * 1024
HELD_BYTES = 4 * MIB  # what the upstream sends before it goes silent
NUM_REQUESTS = 3
# Left behind by three finished requests: the allocator's and the servers' own bookkeeping
# (a log line, a pooled connection), far below the 12 MiB the reads held.
MAX_LEFT_BYTES = 1 * MIB


@pytest.fixture()
def no_cycle_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


CASES = [
    ("slow-body", "/embeddings", {"input": "x"}),  # a whole body, read before answering
    ("slow-stream", "/chat/completions", {"stream": True}),  # recorded for the cache
    ("slow-stream", "/chat/completions", {"stream": True, "temperature": 0.7}),  # forwarded
    ("slow-stream", "/chat/completions", {}),  # assembled for a non-stream client
]


def _ask(port: int, path: str, body: dict[str, Any]) -> None:
    """One request with the standard library's client: httpx keeps its answers in cycles of
    its own, which this test (in the same process) would count against the gateway."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"content-type": "application/json"}
        conn.request("POST", path, body=orjson.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
        response.close()
    finally:
        conn.close()
    assert response.status in (200, 502, 504), data[:200]
    if response.status == 200:  # a stream, ended by an error event
        assert b"upstream_total_timeout" in data[-400:]


@pytest.mark.parametrize(("scenario", "path", "extra"), CASES)
def test_a_timed_out_read_is_freed_without_the_cycle_collector(
    no_cycle_collector: None, scenario: str, path: str, extra: dict[str, Any]
) -> None:
    upstream = HostileUpstream()
    upstream.slow_bytes = HELD_BYTES
    with ServerThread(upstream) as server:
        timeouts = TimeoutConfig(total_s=1.0, idle_s=10.0, first_byte_s=10.0)
        config = make_config({"hostile": server.url + "/v1"}, timeouts=timeouts)
        config = replace(
            config,
            upstreams={
                name: replace(u, retry=replace(u.retry, max_retries=0))
                for name, u in config.upstreams.items()
            },
        )
        with running_gateway(config) as gateway:
            path = f"/v1{path}"
            body = {"model": scenario, **extra}
            if path != "/v1/embeddings":
                body["messages"] = [{"role": "user", "content": "slow"}]
                body.setdefault("temperature", 0)
            _ask(gateway.port, path, {**body, "n_probe": -1})  # warm every lazy structure
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for i in range(NUM_REQUESTS):
                    _ask(gateway.port, path, {**body, "n_probe": i})
                time.sleep(0.3)  # the gateway's side of each request has ended
                left = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
    assert left < MAX_LEFT_BYTES, f"{left / MIB:.1f} MiB left after {NUM_REQUESTS} requests"

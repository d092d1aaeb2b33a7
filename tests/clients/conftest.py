"""Fixtures for the real-client tests: one zero-latency simulator, and hasten in front of
it on each path (``translated``: a chat-only upstream; ``native``: one that speaks the
client's API)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hasten.simulator import SimConfig, build_app
from tests.clients.stack import PATHS, gateway_on
from tests.support.servers import ServerThread


@pytest.fixture(scope="package")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as server:
        yield server


@pytest.fixture(scope="module", params=PATHS)
def gateway(request: pytest.FixtureRequest, sim: ServerThread) -> Iterator[ServerThread]:
    """hasten with the default cache policy (temperature 0 or a seed is cached)."""
    with gateway_on(sim.url, request.param) as server:
        yield server


@pytest.fixture(scope="module", params=PATHS)
def any_sampling_gateway(
    request: pytest.FixtureRequest, sim: ServerThread
) -> Iterator[ServerThread]:
    """hasten whose models cache any sampling (``deterministic_only = false``)."""
    with gateway_on(sim.url, request.param, is_any_sampling=True) as server:
        yield server

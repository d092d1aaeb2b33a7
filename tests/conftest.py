from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support.servers import redis_server

# No wall-clock deadline per example: on a loaded 2-core machine a 200 ms one fails tests that
# assert nothing about time (speed is measured in bench/, side by side).
settings.register_profile("hasten", deadline=None)
settings.load_profile("hasten")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole session."""
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def no_native_engine_in_pytest() -> Iterator[None]:
    """llama.cpp runs only in child processes: a native crash must fail tests, not pytest."""
    yield
    assert "llama_cpp" not in sys.modules, "a test loaded llama.cpp into the pytest process"

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import redis_server


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole session."""
    with redis_server() as url:
        yield url

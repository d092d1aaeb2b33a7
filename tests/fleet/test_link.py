from __future__ import annotations

import logging

import pytest

from hasten.config.fleet import FleetConfig
from hasten.errors import FleetUnavailable
from hasten.fleet.link import FleetLink
from tests.support.servers import free_port, redis_server


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_keys_carry_the_prefix() -> None:
    link = FleetLink(FleetConfig(redis_url="redis://127.0.0.1:1/0", key_prefix="p:"))
    assert link.key("flight", "abc") == "p:flight:abc"


async def test_a_live_redis_answers_through_run() -> None:
    with redis_server() as url:
        link = FleetLink(FleetConfig(redis_url=url))
        try:
            await link.run("set", lambda r: r.set(link.key("k"), b"v"))
            assert await link.run("get", lambda r: r.get(link.key("k"))) == b"v"
            assert link.is_up
        finally:
            await link.aclose()


async def test_a_dead_redis_backs_off_then_is_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    config = FleetConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0", retry_backoff_s=2.0)
    link = FleetLink(config, clock=clock)
    with caplog.at_level(logging.WARNING, logger="hasten.fleet"):
        with pytest.raises(FleetUnavailable, match="redis failed"):
            await link.run("get", lambda r: r.get("x"))
        assert not link.is_up
        # While backing off nothing is sent: the caller falls back at once.
        with pytest.raises(FleetUnavailable, match="redis away"):
            await link.run("get", lambda r: r.get("x"))
        clock.now_s += 2.5
        assert link.is_up
        with pytest.raises(FleetUnavailable, match="redis failed"):
            await link.run("get", lambda r: r.get("x"))
    # One warning per outage, not one per failed call.
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert link.num_failures == 2
    await link.aclose()


async def test_recovery_clears_the_outage(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    port = free_port()
    link = FleetLink(FleetConfig(redis_url=f"redis://127.0.0.1:{port}/0"), clock=clock)
    with pytest.raises(FleetUnavailable):
        await link.run("ping", lambda r: r.ping())
    clock.now_s += 5.0
    with redis_server(port=port), caplog.at_level(logging.INFO, logger="hasten.fleet"):
        assert await link.run("ping", lambda r: r.ping())
        assert any("is back" in r.getMessage() for r in caplog.records)
        assert link.is_up
    await link.aclose()

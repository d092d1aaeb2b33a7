from __future__ import annotations

import pytest

from hasten.config import parse_config
from hasten.config.fleet import DEFAULT_LEASE_S, FleetConfig
from hasten.errors import ConfigError


def test_fleet_is_off_by_default() -> None:
    assert parse_config({}, {}).fleet == FleetConfig()
    assert not FleetConfig().is_enabled


def test_a_redis_url_turns_the_fleet_on() -> None:
    fleet = parse_config({"fleet": {"redis_url": "redis://127.0.0.1:6379/0"}}, {}).fleet
    assert fleet.is_enabled
    assert fleet.lease_s == DEFAULT_LEASE_S
    assert fleet.is_coalescing and fleet.is_sharing_routing


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"redis_url": "http://x"}, "fleet.redis_url: expected a redis://"),
        ({"lease_s": 0}, "fleet.lease_s: must be > 0"),
        ({"stream_max_chunks": 3}, "fleet.stream_max_chunks"),
        ({"coalesce": True}, "fleet.coalesce: unknown key"),
    ],
)
def test_bad_fleet_settings_name_their_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"fleet": table}, {})

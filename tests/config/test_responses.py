"""``[responses]``: where stored responses live, as the deployment says unless told."""

from __future__ import annotations

import pytest

from hasten.config import parse_config
from hasten.config.responses import DEFAULT_RESPONSES_TTL_S, ResponsesConfig
from hasten.errors import ConfigError

REDIS = {"redis_url": "redis://127.0.0.1:6379/0"}


def _backend(data: dict[str, object]) -> str:
    config = parse_config(data, {})
    return config.responses.backend_for(config.cache.backend, config.fleet)


def test_the_backend_follows_the_deployment() -> None:
    assert _backend({}) == "sqlite"
    assert _backend({"cache": {"backend": "memory"}}) == "memory"
    assert _backend({"cache": {"backend": "memory"}, "responses": {"path": "r.db"}}) == "sqlite"
    assert _backend({"fleet": REDIS}) == "redis"
    assert _backend({"fleet": REDIS, "responses": {"backend": "sqlite"}}) == "sqlite"
    assert ResponsesConfig().ttl_s == DEFAULT_RESPONSES_TTL_S == 30 * 24 * 3600


def test_every_key_is_read() -> None:
    config = parse_config(
        {
            "responses": {
                "backend": "sqlite",
                "path": "x.sqlite3",
                "ttl_s": 60,
                "max_record_bytes": 4096,
                "max_bytes": 8192,
                "max_chain_depth": 5,
            }
        },
        {},
    ).responses
    assert config == ResponsesConfig("sqlite", "x.sqlite3", 60.0, 4096, 8192, 5)
    assert config.sqlite_path_beside("/var/lib/hasten/cache.sqlite3") == "x.sqlite3"
    beside = ResponsesConfig().sqlite_path_beside("/var/lib/hasten/cache.sqlite3")
    assert beside == "/var/lib/hasten/hasten-responses.sqlite3"
    assert ResponsesConfig().sqlite_path_beside("hasten-cache.sqlite3") == (
        "hasten-responses.sqlite3"
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"backend": "disk"}, "responses.backend: expected one of"),
        ({"backend": "redis"}, "[fleet] redis_url"),
        ({"ttl_s": 0}, "responses.ttl_s: must be > 0"),
        ({"max_record_bytes": 10}, "responses.max_record_bytes: must be >="),
        ({"max_record_bytes": 1 << 20, "max_bytes": 4096}, "must be <= max_bytes"),
        ({"max_chain_depth": 0}, "responses.max_chain_depth"),
        ({"sotre": True}, "responses.sotre: unknown key"),
    ],
)
def test_a_bad_table_names_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as error:
        parse_config({"responses": table}, {})
    assert message in str(error.value)

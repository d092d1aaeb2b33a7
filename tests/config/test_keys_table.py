"""hasten.config.keys_table: the [keys] table and the limit fields of [server] api_keys entries."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hasten.config import parse_config
from hasten.config.limits import KeyLimits
from hasten.errors import ConfigError
from hasten.server.workers import check_workers


def _parsed(data: dict[str, Any]) -> Any:
    return parse_config(data, {})


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, {})
    return str(caught.value)


def _static(**fields: Any) -> dict[str, Any]:
    return {"server": {"api_keys": [{"tenant": "team-a", "api_key": "k-a", **fields}]}}


def test_static_key_fields() -> None:
    config = _parsed(
        _static(
            id="ci-bot",
            models=["gpt-4o", "embed"],
            requests_per_minute=100,
            tokens_per_minute=20_000,
            max_concurrent=4,
            budget_usd=25.0,
            budget_period="7d",
        )
    )
    (key,) = config.server.api_keys
    assert key.key_id == "ci-bot"
    assert key.models == frozenset({"gpt-4o", "embed"})
    assert key.limits == KeyLimits(100, 20_000, 4, 25.0, 7 * 86_400.0)


def test_a_static_key_without_limits_has_none() -> None:
    (key,) = _parsed(_static()).server.api_keys
    assert key.limits is None and key.models is None and key.key_id is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"requests_per_minute": 0}, "server.api_keys[0].requests_per_minute: must be between 1"),
        ({"requests_per_minute": "100"}, "server.api_keys[0].requests_per_minute: expected an"),
        ({"budget_period": "1d"}, "server.api_keys[0].budget_period: a budget period needs"),
        ({"budget_usd": 1, "budget_period": "1y"}, "server.api_keys[0].budget_period: expected"),
        ({"models": []}, "server.api_keys[0].models: an empty list allows no model"),
        ({"models": ["a", 1]}, "server.api_keys[0].models[1]: expected a model name"),
        ({"models": "a"}, "server.api_keys[0].models: expected a list"),
        ({"id": "vk_0123"}, "server.api_keys[0].id: expected 1 to 64"),
        ({"id": "has space"}, "server.api_keys[0].id: expected 1 to 64"),
        ({"rpm": 5}, "server.api_keys[0].rpm: unknown key"),
    ],
)
def test_static_key_errors(fields: dict[str, Any], message: str) -> None:
    assert _error(_static(**fields)).startswith(message)


def test_static_ids_are_unique() -> None:
    keys = [
        {"tenant": "a", "api_key": "k1", "id": "same"},
        {"tenant": "b", "api_key": "k2", "id": "same"},
    ]
    assert _error({"server": {"api_keys": keys}}) == "server.api_keys[1].id: duplicate id 'same'"


def test_keys_table_defaults_and_store_choice() -> None:
    assert not _parsed({}).keys.is_enabled
    assert _parsed({"keys": {"enabled": True}}).keys.store == "memory"
    sqlite = _parsed({"keys": {"enabled": True, "sqlite_path": "k.sqlite3"}}).keys
    assert (sqlite.store, sqlite.sqlite_path) == ("sqlite", "k.sqlite3")
    fleet = {"redis_url": "redis://127.0.0.1:1/0"}
    assert _parsed({"keys": {"enabled": True}, "fleet": fleet}).keys.store == "redis"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"keys": {"enabld": True}}, "keys.enabld: unknown key"),
        ({"keys": {"sqlite_path": "k"}}, "keys.sqlite_path: virtual keys are off"),
        (
            {"keys": {"enabled": True, "sqlite_path": "k"}, "fleet": {"redis_url": "redis://x/0"}},
            "keys.sqlite_path: with [fleet] redis_url",
        ),
        (
            {"keys": {"enabled": True}, "server": {"workers": 2}},
            "keys.enabled: with [server] workers > 1",
        ),
        ({"keys": {"cache_ttl_s": 0}}, "keys.cache_ttl_s: must be > 0"),
        ({"keys": {"cache_ttl_s": 120}}, "keys.cache_ttl_s: must be <= 60"),
        ({"keys": {"max_keys": 0}}, "keys.max_keys: must be >= 1"),
        ({"keys": {"max_keys": 10**7}}, "keys.max_keys: must be <="),
    ],
)
def test_keys_table_errors(data: dict[str, Any], message: str) -> None:
    assert _error(data).startswith(message)


def test_check_config_validates_limit_fields(tmp_path: Path) -> None:
    path = tmp_path / "hasten.toml"
    path.write_text(
        '[[server.api_keys]]\ntenant = "a"\napi_key = "k"\nrequests_per_minute = -5\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "hasten", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "server.api_keys[0].requests_per_minute: must be between 1" in done.stderr


def test_tenant_policies_may_name_virtual_tenants() -> None:
    policy = {"tenants": {"team-v": {"policy": {"max_tokens_cap": 100}}}}
    assert "team-v" in _parsed({**policy, "keys": {"enabled": True}}).tenant_policies
    assert "need gateway keys" in _error(policy)


def test_workers_from_a_flag_refuse_keys_in_memory() -> None:
    config = _parsed({"keys": {"enabled": True}})
    server = replace(config.server, num_workers=2)
    with pytest.raises(ConfigError, match=r"\[keys\] in memory"):
        check_workers(replace(config, server=server))
    sqlite = _parsed({"keys": {"enabled": True, "sqlite_path": "k.sqlite3"}})
    check_workers(replace(sqlite, server=replace(sqlite.server, num_workers=2)))


def test_check_config_describes_virtual_keys(tmp_path: Path) -> None:
    path = tmp_path / "hasten.toml"
    path.write_text('[keys]\nenabled = true\nsqlite_path = "k.sqlite3"\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "hasten", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "virtual keys: on (SQLite k.sqlite3; at most 10000; a revoked key is refused" in (
        done.stdout
    )

"""hasten.keys.factory: which store a gateway's [keys] table gets, and what it logs."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from hasten.config import GatewayConfig, ServerConfig
from hasten.config.fleet import FleetConfig
from hasten.config.keys_table import KeysConfig
from hasten.fleet.link import FleetLink
from hasten.keys.factory import build_key_directory

WITH_ADMIN = GatewayConfig(server=ServerConfig(admin_api_key="admin"))


def test_off_by_default() -> None:
    assert build_key_directory(GatewayConfig(), None) is None


async def test_memory_says_keys_vanish(caplog: pytest.LogCaptureFixture) -> None:
    config = replace(WITH_ADMIN, keys=KeysConfig(is_enabled=True))
    with caplog.at_level(logging.INFO, logger="hasten.keys"):
        directory = build_key_directory(config, None)
    assert directory is not None and directory.store.kind == "memory"
    assert "vanish on restart" in caplog.text
    assert "within 1 s" in caplog.text
    assert "no admin key" not in caplog.text


async def test_sqlite(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    keys = KeysConfig(is_enabled=True, store="sqlite", sqlite_path=str(tmp_path / "k.sqlite3"))
    with caplog.at_level(logging.INFO, logger="hasten.keys"):
        directory = build_key_directory(replace(WITH_ADMIN, keys=keys), None)
    assert directory is not None and directory.store.kind == "sqlite"
    assert "vanish" not in caplog.text
    await directory.aclose()


async def test_redis_through_the_fleet_link(redis_url: str) -> None:
    fleet = FleetConfig(redis_url=redis_url)
    config = replace(WITH_ADMIN, fleet=fleet, keys=KeysConfig(is_enabled=True, store="redis"))
    link = FleetLink(fleet)
    directory = build_key_directory(config, link)
    assert directory is not None and directory.store.kind == "redis"
    await link.aclose()


def test_no_admin_key_is_worth_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    config = replace(GatewayConfig(), keys=KeysConfig(is_enabled=True))
    with caplog.at_level(logging.WARNING, logger="hasten.keys"):
        build_key_directory(config, None)
    assert "no admin key is set" in caplog.text

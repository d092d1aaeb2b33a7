"""hasten.responses.factory: the store ``[responses]`` and the deployment name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hasten.config import CacheConfig, GatewayConfig
from hasten.config.responses import ResponsesConfig
from hasten.responses.factory import build_response_state
from hasten.responses.sqlite_store import SQLiteResponseStore
from hasten.responses.store import MemoryResponseStore


async def test_a_memory_cache_keeps_responses_in_memory() -> None:
    state = build_response_state(GatewayConfig(cache=CacheConfig(backend="memory")), None)
    assert isinstance(state.store, MemoryResponseStore)
    await state.aclose()


async def test_a_sqlite_cache_keeps_them_in_a_file_beside_its_own(tmp_path: Path) -> None:
    cache = CacheConfig(sqlite_path=str(tmp_path / "cache.sqlite3"))
    state = build_response_state(GatewayConfig(cache=cache), None)
    assert isinstance(state.store, SQLiteResponseStore)
    assert state.store.path == tmp_path / "hasten-responses.sqlite3"
    await state.aclose()
    named = replace(
        GatewayConfig(cache=cache), responses=ResponsesConfig(path=str(tmp_path / "r.db"))
    )
    state = build_response_state(named, None)
    assert isinstance(state.store, SQLiteResponseStore) and state.store.path == tmp_path / "r.db"
    assert state.ttl_s == ResponsesConfig().ttl_s
    await state.aclose()

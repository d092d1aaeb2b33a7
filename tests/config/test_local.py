"""Unit tests for hasten.config.local: the ``[local]`` table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hasten.config.local import EngineConfig, LocalServerConfig, load_local_config, parse_local
from hasten.config.reader import TomlTable
from hasten.errors import ConfigError


def test_local_config_table() -> None:
    config = parse_local(TomlTable({"port": 9000, "n_ctx": 2048, "model_path": "/m.gguf"}, "local"))
    assert config.port == 9000 and config.engine.n_ctx == 2048
    assert str(config.engine.model_path) == "/m.gguf"
    with pytest.raises(ConfigError):
        parse_local(TomlTable({"bogus": 1}, "local"))
    with pytest.raises(ConfigError):
        EngineConfig(max_seqs=0).check()


def test_local_config_table_keys_and_errors(tmp_path: Path) -> None:
    table = {
        "host": "0.0.0.0",
        "command": ["python", "-m", "x"],
        "restart_backoff_s": 0,
        "max_restarts_per_minute": 0,
        "n_threads": 2,
    }
    config = parse_local(TomlTable(table, "local"))
    assert (config.host, config.command) == ("0.0.0.0", ("python", "-m", "x"))
    assert (config.restart_backoff_s, config.max_restarts_per_minute) == (0.0, 0)
    assert config.engine == EngineConfig(n_threads=2)
    assert parse_local(TomlTable({}, "local")) == LocalServerConfig()
    bad: list[tuple[dict[str, object], str]] = [
        ({"command": ["a", 1]}, "local.command[1]: expected a string, got 1"),
        ({"restart_backoff_s": -1}, "local.restart_backoff_s: must be >= 0, got -1"),
        ({"max_restarts_per_minute": -1}, "local.max_restarts_per_minute: must be >= 0, got -1"),
        ({"model_path": 1}, "local.model_path: expected a string, got int 1"),
        ({"n_ctx": True}, "local.n_ctx: expected an integer, got bool True"),
        ({"cache_ram_mib": -1}, "local.cache_ram_mib: must be >= 0, got -1"),
        ({"max_queue": "32"}, "local.max_queue: expected an integer"),
        ({"max_queue": -1}, "local.max_queue: must be >= 0, got -1"),
        ({"max_step_tokens": "x"}, "local.max_step_tokens: expected an integer"),  # retired
    ]
    for values, message in bad:
        with pytest.raises(ConfigError) as info:
            parse_local(TomlTable(values, "local"))
        assert str(info.value).startswith(message), str(info.value)
    # `hasten local --config` reads the gateway's file: its other tables are not its business.
    path = tmp_path / "hasten.toml"
    path.write_text('[server]\nport = 1\n[local]\nport = 9100\nmodel_path = "/m.gguf"\n')
    loaded = load_local_config(path)
    assert loaded.port == 9100 and str(loaded.engine.model_path) == "/m.gguf"


def test_a_retired_engine_setting_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A config written for the engine before llama-server still starts, and says why its
    # setting no longer does anything; a misspelt key is still an error.
    with caplog.at_level("WARNING", logger="hasten.local"):
        config = parse_local(TomlTable({"max_step_tokens": 512, "num_cache_slots": 4}, "local"))
    assert config == LocalServerConfig()
    assert "[local] max_step_tokens is no longer used" in caplog.text
    assert "num_cache_slots" in caplog.text and "cache_ram_mib" in caplog.text
    with pytest.raises(ConfigError, match="max_queues"):
        parse_local(TomlTable({"max_queues": 32}, "local"))


def test_max_queue_bounds_the_local_upstream_past_its_sequences(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No longer retired (llama-server would queue without a bound): read without a warning,
    # and the local upstream's in-flight cap is the sequences plus the queue.
    with caplog.at_level("WARNING", logger="hasten.local"):
        config = parse_local(TomlTable({"max_seqs": 3, "max_queue": 0}, "local"))
    assert "max_queue" not in caplog.text
    assert (config.max_queue, config.max_in_flight) == (0, 3)
    default = LocalServerConfig()
    assert (default.max_queue, default.max_in_flight) == (32, 8 + 32)

"""Unit tests for hasten.simulator.config: validated updates and the ``[simulator]`` table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hasten.errors import ConfigError
from hasten.simulator.config import config_from_mapping, load_toml_config


def test_config_updates_are_validated() -> None:
    config = config_from_mapping({"decode_ms_per_token": 2, "models": "a, b"})
    assert config.decode_ms_per_token == 2.0 and config.models == ("a", "b")
    assert config.draw_by == "arrival"
    assert config.updated({"draw_by": "trace"}).draw_by == "trace"
    bad_changes: list[dict[str, object]] = [
        {"no_such_field": 1},
        {"error_rate": 1.5},
        {"error_rate": 0.6, "rate_limit_rate": 0.6},
        {"silent_rate": 0.5, "hang_rate": 0.3, "truncate_rate": 0.3},  # every rate counts
        {"malformed_rate": -0.1},
        {"rtt_ms": -1},
        {"rtt_ms": "fast"},
        {"seed": 1.5},
        {"strict_models": 1},
        {"output_tokens": True},
        {"prefill_cached_ms_per_token": 1},  # cached prefill may not cost more than uncached
        {"models": []},
        {"draw_by": "random"},
        {"draw_by": 1},
    ]
    for changes in bad_changes:
        with pytest.raises(ConfigError):
            config.updated(changes)


def test_toml_config_reads_the_simulator_table(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text('[simulator]\nttft_base_ms = 50\nmodels = ["x"]\n\n[gateway]\nport = 1\n')
    config = load_toml_config(path)
    assert config.ttft_base_ms == 50.0 and config.models == ("x",)
    path.write_text("[simulator]\nttft_base_ms = -5\n")
    with pytest.raises(ConfigError):
        load_toml_config(path)
    with pytest.raises(ConfigError):
        load_toml_config(tmp_path / "missing.toml")


def test_the_new_fault_rates_are_faults() -> None:
    for name in ("silent_rate", "hang_rate", "malformed_rate", "truncate_rate"):
        assert config_from_mapping({name: 0.5}).has_faults

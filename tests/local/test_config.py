"""Unit tests for hasten.local.config: the ``[local]`` table."""

from __future__ import annotations

import pytest

from hasten.errors import ConfigError
from hasten.local.config import EngineConfig, parse_local_table


def test_local_config_table() -> None:
    config = parse_local_table({"port": 9000, "n_ctx": 2048, "model_path": "/m.gguf"})
    assert config.port == 9000 and config.engine.n_ctx == 2048
    assert str(config.engine.model_path) == "/m.gguf"
    with pytest.raises(ConfigError):
        parse_local_table({"bogus": 1})
    with pytest.raises(ConfigError):
        EngineConfig(max_seqs=0).check()

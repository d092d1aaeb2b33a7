"""The ``hasten local`` command line: flags over the config file, a clean exit without a model."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from hasten.local.server import add_arguments, resolve_config


def test_server_flags_override_the_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "hasten.toml"
    config_file.write_text("[local]\nport = 9100\nn_ctx = 2048\nmax_seqs = 2\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--config", str(config_file), "--max-seqs", "4"])
    config = resolve_config(args)
    assert (config.host, config.port) == ("127.0.0.1", 9100)
    assert (config.engine.n_ctx, config.engine.max_seqs) == (2048, 4)
    defaults = resolve_config(parser.parse_args([]))
    assert defaults.port == 8091 and defaults.engine.model_path is None


def test_server_run_fails_cleanly_without_a_model(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    command = [sys.executable, "-m", "hasten", "local", "--model-path", str(missing)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "GGUF model not found" in done.stderr and str(missing) in done.stderr

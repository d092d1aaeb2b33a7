"""LiteLLM proxy for comparison benchmarks: its own venv (``bench_venv``), config, launch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bench.support.bench_venv import BenchVenv, VenvInstall
from bench.support.bench_venv import ensure_installed as _ensure_installed

VENV = BenchVenv("litellm", requirements=("litellm[proxy]",), distribution="litellm",
                 probe="bin/litellm")  # fmt: skip
MODEL_NAME = "sim-model"
MASTER_KEY = "sk-hasten-bench"


def ensure_installed() -> VenvInstall:
    """Installs LiteLLM into its venv unless already there; never raises for install trouble."""
    return _ensure_installed(VENV)


def write_config(directory: Path, upstream_base_url: str) -> Path:
    """A proxy config routing ``sim-model`` to the simulator, as an OpenAI-compatible backend."""
    path = directory / "litellm.yaml"
    path.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL_NAME}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL_NAME}\n"
        f"      api_base: {upstream_base_url}\n"
        "      api_key: sk-dummy\n"
        "general_settings:\n"
        f"  master_key: {MASTER_KEY}\n",
        encoding="utf-8",
    )
    return path


def command(executable: Path, config_path: Path, port: int) -> list[str]:
    return [
        str(executable),
        "--config",
        str(config_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Offline, quiet, keyed: without these it fetches a price list and refuses to start."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY_DISABLED": "True",
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "LITELLM_LOG": "ERROR",
        }
    )
    return env

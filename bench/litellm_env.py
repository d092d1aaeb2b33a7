"""LiteLLM proxy for comparison benchmarks: its own venv under bench/.venvs, config, launch.

Kept out of the project's venv on purpose: LiteLLM pins many packages of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

VENV_DIR = Path(__file__).resolve().parent / ".venvs" / "litellm"
PACKAGE_SPEC = "litellm[proxy]"
MODEL_NAME = "sim-model"
MASTER_KEY = "sk-hasten-bench"
INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class LiteLLMInstall:
    """Outcome of making sure LiteLLM is installed; ``reason`` says why it is not."""

    executable: Path | None
    version: str | None
    install_s: float | None
    reason: str | None = None


def ensure_installed() -> LiteLLMInstall:
    """Installs LiteLLM into its venv unless already there; never raises for install trouble."""
    executable = VENV_DIR / "bin" / "litellm"
    install_s: float | None = None
    if not executable.exists():
        start_s = time.perf_counter()
        problem = _install()
        install_s = time.perf_counter() - start_s
        if problem is not None:
            return LiteLLMInstall(None, None, install_s, reason=problem)
    return LiteLLMInstall(executable, _version(), install_s)


def _install() -> str | None:
    base_python = shutil.which("python3") or sys.executable
    steps = [
        [base_python, "-m", "venv", str(VENV_DIR)],
        [str(VENV_DIR / "bin" / "pip"), "install", "--quiet", PACKAGE_SPEC],
    ]
    print(f"installing {PACKAGE_SPEC} into {VENV_DIR} ...", file=sys.stderr, flush=True)
    for step in steps:
        try:
            done = subprocess.run(
                step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(step[:3])}: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"{' '.join(step[:3])} failed: {' | '.join(tail)}"
    if not (VENV_DIR / "bin" / "litellm").exists():
        return "pip finished but no litellm executable appeared"
    return None


def _version() -> str | None:
    python = VENV_DIR / "bin" / "python"
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    try:
        done = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


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

"""A comparison tool's own venv under bench/.venvs, built on first use by the bench itself.

Kept out of the project's venv on purpose: the tools compared against (LiteLLM, GPTCache) pin
packages of their own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VENVS_DIR = Path(__file__).resolve().parents[1] / ".venvs"
INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class BenchVenv:
    """One tool's venv: what pip installs into it, and the file that shows it is installed."""

    name: str
    requirements: tuple[str, ...]
    distribution: str  # whose version is reported
    probe: str = "bin/python"  # relative to the venv

    @property
    def directory(self) -> Path:
        return VENVS_DIR / self.name

    @property
    def python(self) -> Path:
        return self.directory / "bin" / "python"

    @property
    def probe_path(self) -> Path:
        return self.directory / self.probe

    @property
    def marker_path(self) -> Path:
        """Written after a successful install: a half-built venv, or changed pins, reinstall."""
        return self.directory / ".bench-requirements"

    def is_installed(self) -> bool:
        if not (self.probe_path.exists() and self.marker_path.exists()):
            return False
        return self.marker_path.read_text(encoding="utf-8").split() == list(self.requirements)


@dataclass(frozen=True, slots=True)
class VenvInstall:
    """Outcome of making sure a tool is installed; ``reason`` says why it is not."""

    executable: Path | None
    version: str | None
    install_s: float | None
    reason: str | None = None


def ensure_installed(venv: BenchVenv) -> VenvInstall:
    """Installs the tool into its venv unless already there; never raises for install trouble."""
    install_s: float | None = None
    if not venv.is_installed():
        start_s = time.perf_counter()
        problem = _install(venv)
        install_s = time.perf_counter() - start_s
        if problem is not None:
            return VenvInstall(None, None, install_s, reason=problem)
    return VenvInstall(venv.probe_path, installed_version(venv), install_s)


def _install(venv: BenchVenv) -> str | None:
    base_python = shutil.which("python3") or sys.executable
    steps = [
        [base_python, "-m", "venv", str(venv.directory)],
        [str(venv.directory / "bin" / "pip"), "install", "--quiet", *venv.requirements],
    ]
    print(
        f"installing {' '.join(venv.requirements)} into {venv.directory} ...",
        file=sys.stderr,
        flush=True,
    )
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
    if not venv.probe_path.exists():
        return f"pip finished but no {venv.probe} appeared"
    venv.marker_path.write_text("\n".join(venv.requirements) + "\n", encoding="utf-8")
    return None


def installed_version(venv: BenchVenv) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({venv.distribution!r}))"
    try:
        done = subprocess.run(
            [str(venv.python), "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None

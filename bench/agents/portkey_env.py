"""Portkey's gateway (npm ``@portkey-ai/gateway``) for comparison benchmarks: installed by the
bench itself into bench/.npm/portkey (gitignored), run with node.

Portkey routes by headers, not by a config file: ``x-portkey-provider`` (openai for chat and
Responses, anthropic for Messages: it translates none of them) and
``x-portkey-custom-host`` (the simulator). It listens on every interface (its server takes
no host); the benchmark only ever sends it loopback traffic.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "@portkey-ai/gateway"
VERSION = "1.15.2"
DIRECTORY = Path(__file__).resolve().parents[1] / ".npm" / "portkey"
SCRIPT = DIRECTORY / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
INSTALL_TIMEOUT_S = 600.0
PROVIDERS = {"chat": "openai", "responses": "openai", "messages": "anthropic"}


@dataclass(frozen=True, slots=True)
class PortkeyInstall:
    script: Path | None
    version: str | None
    install_s: float | None
    reason: str | None = None


def ensure_installed() -> PortkeyInstall:
    """npm-installs the gateway unless there; never raises for install trouble."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return PortkeyInstall(None, None, None, reason="node and npm are needed")
    install_s = None
    if not SCRIPT.exists():
        DIRECTORY.mkdir(parents=True, exist_ok=True)
        started_s = time.perf_counter()
        step = [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(DIRECTORY),
            f"{PACKAGE}@{VERSION}",
        ]
        try:
            done = subprocess.run(
                step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return PortkeyInstall(None, None, None, reason=f"npm install: {exc}")
        install_s = time.perf_counter() - started_s
        if done.returncode != 0 or not SCRIPT.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return PortkeyInstall(None, None, install_s, reason="npm install: " + " | ".join(tail))
    return PortkeyInstall(SCRIPT, VERSION, install_s)


def command(script: Path, port: int) -> list[str]:
    return [shutil.which("node") or "node", str(script), f"--port={port}", "--headless"]


def environment(base: dict[str, str]) -> dict[str, str]:
    return {**base, "NODE_ENV": "production"}  # no log UI


def headers(api: str, upstream_url: str) -> dict[str, str]:
    """Per request: which provider Portkey speaks to, and where (``upstream_url`` ends in /v1)."""
    return {"x-portkey-provider": PROVIDERS[api], "x-portkey-custom-host": upstream_url}

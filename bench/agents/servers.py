"""The servers of bench/agents/agents.py: two simulators and one hasten, as child processes.

``tail``: a heavy-tailed simulator (log-normal TTFT, a few % stragglers at 10x), the
upstream of the tail and repeat phases. ``fast``: a zero-latency one, for what the gateway
adds on a miss. hasten fronts both with the routes below, configured as a user would: hedging
``enabled = true`` and every other hedge setting at its default, the cache on for these
models (``deterministic_only = false``: agents send no temperature 0).

    agent-native        3 deployments on ``tail`` that speak chat, responses and messages
    agent-translated    the same simulator as 3 chat-only deployments (hasten translates)
    fast-native         1 deployment on ``fast`` (all three APIs)
    fast-translated     the same, chat only

Three deployments on one simulator: a hedge goes to another deployment, and each request
draws its own latency, as another replica of a provider would.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.support.server_process import ServerProcess, clean_environment, free_port

READY_TIMEOUT_S = 120.0
NUM_DEPLOYMENTS = 3
ROUTES = {
    "native": ("agent-native", "fast-native"),  # path -> (tail model, fast model)
    "translated": ("agent-translated", "fast-translated"),
}


@dataclass(frozen=True, slots=True)
class TailShape:
    """The heavy-tailed simulator: what a provider's TTFT looks like from a client."""

    rtt_ms: float = 20.0
    ttft_ms: float = 100.0
    jitter_sigma: float = 0.2
    straggler_prob: float = 0.03
    straggler_mult: float = 10.0
    decode_ms: float = 2.0
    output_tokens: int = 16


def hasten_command() -> list[str]:
    return [sys.executable, "-m", "hasten"]


def Process(
    name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> ServerProcess:
    """A server in its own process group; no HASTEN_* setting of the caller's shell changes
    it unless ``env`` is given."""
    return ServerProcess(
        name, argv, log_path=log_path, env=clean_environment() if env is None else env
    )


def simulator_toml(shape: TailShape | None, seed: int) -> str:
    lines = ["[simulator]", "runs_to_max_tokens = false", f"seed = {seed}"]
    if shape is not None:
        lines += [
            f"rtt_ms = {shape.rtt_ms}",
            f"ttft_base_ms = {shape.ttft_ms}",
            f"jitter_sigma = {shape.jitter_sigma}",
            f"straggler_prob = {shape.straggler_prob}",
            f"straggler_mult = {shape.straggler_mult}",
            f"decode_ms_per_token = {shape.decode_ms}",
            f"output_tokens = {shape.output_tokens}",
            # Direct and hasten meet the same stragglers turn by turn (conversation.traceparent).
            'draw_by = "trace"',
        ]
    return "\n".join(lines) + "\n"


def gateway_toml(tail_url: str, fast_url: str, hedge_budget_burst: float | None = None) -> str:
    """``hedge_budget_burst``: None keeps every hedge setting at its default."""
    native = 'api = ["chat", "responses", "messages"]'
    lines: list[str] = []

    def upstream(name: str, url: str, api: str) -> None:
        lines.extend([f"[upstreams.{name}]", f'url = "{url}/v1"', api, ""])

    def model(name: str, upstreams: list[str]) -> None:
        deployments = ", ".join(f'{{ upstream = "{u}" }}' for u in upstreams)
        lines.extend(
            [
                f'[models."{name}"]',
                f"deployments = [{deployments}]",
                "cache = { deterministic_only = false }",
                f'[models."{name}".routing.hedge]',
                "enabled = true",
            ]
        )
        if hedge_budget_burst is not None:
            lines.append(f"budget_burst = {hedge_budget_burst:g}")
        lines.append("")

    for index in range(NUM_DEPLOYMENTS):
        upstream(f"tail{index}", tail_url, native)
        upstream(f"tailchat{index}", tail_url, 'api = ["chat"]')
    upstream("fast", fast_url, native)
    upstream("fastchat", fast_url, 'api = ["chat"]')
    model("agent-native", [f"tail{i}" for i in range(NUM_DEPLOYMENTS)])
    model("agent-translated", [f"tailchat{i}" for i in range(NUM_DEPLOYMENTS)])
    model("fast-native", ["fast"])
    model("fast-translated", ["fastchat"])
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Servers:
    tail_url: str
    fast_url: str
    hasten_url: str
    commands: dict[str, list[str]]
    gateway_config: str


@contextlib.contextmanager
def started(
    workdir: Path, shape: TailShape, seed: int, hedge_budget_burst: float | None = None
) -> Iterator[Servers]:
    hasten = hasten_command()
    tail_port, fast_port, gateway_port = free_port(), free_port(), free_port()
    tail_url, fast_url = f"http://127.0.0.1:{tail_port}", f"http://127.0.0.1:{fast_port}"
    processes: list[ServerProcess] = []
    for name, port, tail_shape in (("tail", tail_port, shape), ("fast", fast_port, None)):
        config = workdir / f"{name}.toml"
        config.write_text(simulator_toml(tail_shape, seed), encoding="utf-8")
        argv = [
            *hasten,
            "simulate",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            str(config),
        ]
        processes.append(Process(name, argv, workdir / f"{name}.log"))
    gateway_config = gateway_toml(tail_url, fast_url, hedge_budget_burst)
    (workdir / "hasten.toml").write_text(gateway_config, encoding="utf-8")
    gateway = Process(
        "hasten",
        [
            *hasten,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(gateway_port),
            "--config",
            str(workdir / "hasten.toml"),
            "--sqlite-path",
            str(workdir / "cache.sqlite3"),
            "--log-level",
            "warning",
        ],
        workdir / "hasten.log",
    )
    processes.append(gateway)
    with contextlib.ExitStack() as stack:
        for process in processes:
            stack.callback(process.stop)
            process.start()
        processes[0].wait_ready(f"{tail_url}/v1/models", READY_TIMEOUT_S)
        processes[1].wait_ready(f"{fast_url}/v1/models", READY_TIMEOUT_S)
        hasten_url = f"http://127.0.0.1:{gateway_port}"
        gateway.wait_ready(f"{hasten_url}/healthz", READY_TIMEOUT_S)
        yield Servers(
            tail_url, fast_url, hasten_url, {p.name: p.argv for p in processes}, gateway_config
        )


def machine() -> dict[str, object]:
    model_name = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                model_name = line.split(":", 1)[1].strip()
    return {
        "cpu": model_name,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }

"""Servers for bench/routing/routing.py: simulators, one hasten gateway with four routes, LiteLLM.

Routes on the one gateway (each keeps its own routing state):
    sim-model     three deployments, latency-aware, hedging on
    sim-nohedge   the same three, latency-aware, hedging off
    sim-affinity  four prefix-cache deployments, prefix affinity on
    sim-spread    the same four, affinity off (latency-aware P2C only)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.support import litellm_env
from bench.support.server_process import ServerProcess, free_port

READY_TIMEOUT_S = 120.0
TAIL_SIMS = ("a", "b", "c")
CACHE_SIMS = ("p1", "p2", "p3", "p4")
# Log-normal TTFT around 300 ms, 3% stragglers at 10x, 20 tokens at ~10 ms.
TAIL_FLAGS = ("--ttft-ms", "300", "--jitter-sigma", "0.2", "--straggler-prob", "0.03",
              "--straggler-mult", "10", "--decode-ms", "10", "--output-tokens", "20")  # fmt: skip
HEDGE_BUDGET_BURST = 20  # hedges the budget may save up (0: the default sliding window)
PREFIX_CACHE_BLOCKS = 260  # per simulator: a quarter of the working set, plus a little


def cache_flags(seed: int) -> tuple[str, ...]:
    return ("--ttft-ms", "40", "--prefill-ms", "0.4", "--prefill-cached-ms", "0.02",
            "--decode-ms", "5", "--output-tokens", "8", "--jitter-sigma", "0.1",
            "--prefix-cache-blocks", str(PREFIX_CACHE_BLOCKS), "--seed", str(seed))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fleet:
    sims: dict[str, str]  # name -> base URL (without /v1)
    gateway_url: str
    litellm_url: str | None
    litellm_error: str | None
    commands: dict[str, list[str]]


def gateway_toml(sims: dict[str, str]) -> str:
    lines = []
    for name, url in sims.items():
        lines += [f"[upstreams.{name}]", f'url = "{url}/v1"', "max_retries = 1", ""]

    def route(model: str, names: tuple[str, ...], routing: list[str], hedge: bool) -> None:
        deployments = ", ".join(f'{{ upstream = "{n}" }}' for n in names)
        lines.extend([f'[models."{model}"]', f"deployments = [{deployments}]"])
        lines.extend([f'[models."{model}".routing]', *routing])
        lines.extend([f'[models."{model}".routing.hedge]', f"enabled = {str(hedge).lower()}"])
        # A bucket, not the sliding window: room at the cold start and when c degrades
        # (docs/benchmarks.md, "Two hedges: the p99.9 bound"), within a hard cap of
        # max(burst, 5% of the requests since the start) hedges (routing/budget.py).
        lines.extend(["max_delay_ms = 1000", f"budget_burst = {HEDGE_BUDGET_BURST:g}", ""])

    route("sim-model", TAIL_SIMS, ["affinity = false"], True)
    route("sim-nohedge", TAIL_SIMS, ["affinity = false"], False)
    route(
        "sim-affinity", CACHE_SIMS, ["affinity = true", "affinity_min_prefix_chars = 1024"], False
    )
    route("sim-spread", CACHE_SIMS, ["affinity = false"], False)
    return "\n".join(lines) + "\n"


def litellm_yaml(sims: dict[str, str]) -> str:
    lines = ["model_list:"]
    for name in TAIL_SIMS:
        lines += [
            f"  - model_name: {litellm_env.MODEL_NAME}",
            "    litellm_params:",
            f"      model: openai/{litellm_env.MODEL_NAME}",
            f"      api_base: {sims[name]}/v1",
            "      api_key: sk-dummy",
        ]
    lines += [
        "router_settings:",
        "  routing_strategy: latency-based-routing",
        "general_settings:",
        f"  master_key: {litellm_env.MASTER_KEY}",
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def started_fleet(
    workdir: Path, hasten: list[str], env: dict[str, str], litellm_exe: Path | None
) -> Iterator[Fleet]:
    ports = {name: free_port() for name in (*TAIL_SIMS, *CACHE_SIMS)}
    sims = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    processes: list[ServerProcess] = []
    for index, name in enumerate(ports):
        flags = (*TAIL_FLAGS, "--seed", str(index + 1)) if name in TAIL_SIMS else cache_flags(index)
        argv = [*hasten, "simulate", "--host", "127.0.0.1", "--port", str(ports[name]), *flags]
        processes.append(ServerProcess(name, argv, log_path=workdir / f"{name}.log", env=env))
    config_path = workdir / "hasten.toml"
    config_path.write_text(gateway_toml(sims), encoding="utf-8")
    gateway_port = free_port()
    gateway = ServerProcess(
        "hasten",
        [*hasten, "serve", "--config", str(config_path), "--port", str(gateway_port),
         "--no-cache", "--log-level", "warning"],
        log_path=workdir / "hasten.log",
        env=env,
    )  # fmt: skip
    processes.append(gateway)
    litellm = None
    litellm_port = free_port()
    if litellm_exe is not None:
        litellm_path = workdir / "litellm.yaml"
        litellm_path.write_text(litellm_yaml(sims), encoding="utf-8")
        litellm = ServerProcess(
            "litellm",
            litellm_env.command(litellm_exe, litellm_path, litellm_port),
            log_path=workdir / "litellm.log",
            env=litellm_env.environment(env),
        )
        processes.append(litellm)
    with ExitStack() as stack:
        for process in processes:
            stack.callback(process.stop)
            process.start()
        for name, url in sims.items():
            next(p for p in processes if p.name == name).wait_ready(f"{url}/v1/models", 60)
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        gateway.wait_ready(f"{gateway_url}/healthz", READY_TIMEOUT_S)
        litellm_url, litellm_error = None, None
        if litellm is not None:
            auth = {"Authorization": f"Bearer {litellm_env.MASTER_KEY}"}
            try:
                url = f"http://127.0.0.1:{litellm_port}"
                litellm.wait_ready(f"{url}/health/liveliness", READY_TIMEOUT_S, auth)
                litellm_url = url
            except RuntimeError as exc:
                litellm_error = str(exc)
                litellm.stop()
        commands = {p.name: p.argv for p in processes}
        yield Fleet(sims, gateway_url, litellm_url, litellm_error, commands)

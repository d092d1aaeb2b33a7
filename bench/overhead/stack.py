"""Which HTTP server and upstream client make the fastest gateway: every pair, one run.

Servers: uvicorn (httptools, uvloop: what ``hasten serve`` runs) and granian (Rust, ASGI
interface, uvloop). Clients, behind hasten's ``Transport`` seam: aiohttp (today's), pyreqwest,
rnet and the lean asyncio-protocol client on httptools (``hasten.upstream.lean``, hasten's
default since it won here; adapters in ``bench/support/stack_transports.py``). Every
pair fronts the same zero-latency simulator and is measured by ``bench/overhead/overhead.py``'s
rounds (sequential non-stream latency, stream TTFT, throughput at 32 clients), targets
rotated round by round so machine noise lands on all of them alike. Prints one summary
line plus JSON.

    .venv/bin/python bench/overhead/stack.py [--quick] [--servers uvicorn,granian]
                                    [--clients aiohttp,pyreqwest,rnet,lean] [--json]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import orjson

from bench.overhead.overhead import (
    FULL_PLAN,
    QUICK_PLAN,
    READY_TIMEOUT_S,
    Target,
    hasten_executable,
    measure,
    measure_cache_hits,
)
from bench.support.overhead_figures import figures, percentiles
from bench.support.server_process import ServerProcess, clean_environment, free_port, invocation
from hasten.loadgen.cli import run_coroutine

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ("uvicorn", "granian")
CLIENTS = ("aiohttp", "pyreqwest", "rnet", "lean")


def gateway_command(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [sys.executable, str(ROOT / "bench" / "support" / "stack_gateway.py"), str(port)]
    return [
        sys.executable, "-m", "granian", "--interface", "asgi", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http", "1",
        "--no-ws", "--workers", "1", "--log-level", "warning",
        "bench.support.stack_gateway:build_app",
    ]  # fmt: skip


@contextmanager
def started(workdir: Path, servers: list[str], clients: list[str]) -> Iterator[dict[str, Target]]:
    env = clean_environment()
    # This checkout's sources first, so a run from a branch measures that branch.
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'src'}"
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    simulator = ServerProcess(
        "simulator",
        [*hasten_executable(), "simulate", "--host", "127.0.0.1", "--port", str(sim_port)],
        log_path=workdir / "simulator.log",
        env=env,
    )
    gateways: dict[str, tuple[ServerProcess, int]] = {}
    for server in servers:
        for client in clients:
            port = free_port()
            name = f"{server}+{client}"
            gateways[name] = (
                ServerProcess(
                    name,
                    gateway_command(server, port),
                    log_path=workdir / f"{name}.log",
                    env={**env, "STACK_UPSTREAM": f"{sim_url}/v1", "STACK_CLIENT": client},
                ),
                port,
            )
    with ExitStack() as stack:
        for process in (simulator, *(g for g, _ in gateways.values())):
            stack.callback(process.stop)
            process.start()
        simulator.wait_ready(f"{sim_url}/v1/models", READY_TIMEOUT_S)
        targets = {"direct": Target("direct", f"{sim_url}/v1", (simulator,))}
        for name, (process, port) in gateways.items():
            url = f"http://127.0.0.1:{port}"
            process.wait_ready(f"{url}/healthz", READY_TIMEOUT_S)
            targets[name] = Target(name, f"{url}/v1", (process,))
        yield targets


def summary_line(result: dict[str, Any]) -> str:
    added = result["added_ms"]
    rps = result["throughput_rps"]
    best = min(
        (name for name in added if name != "direct"),
        key=lambda name: added[name]["sequential"]["p50"] or float("inf"),
    )
    cells = ", ".join(
        f"{name} +{added[name]['sequential']['p50']}/{added[name]['sequential']['p99']} ms "
        f"{rps[name]} rps"
        for name in added
        if name != "direct"
    )
    return f"stack (added p50/p99 sequential, rps @32): {cells}; lowest added p50: {best}"


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    workdir = Path(tempfile.mkdtemp(prefix="hasten-stack-"))
    result: dict[str, Any] = {"benchmark": "server_client_stack", "command": command}
    try:
        with started(workdir, args.servers.split(","), args.clients.split(",")) as targets:
            tallies = run_coroutine(measure(targets, plan))
            hits = {
                name: run_coroutine(measure_cache_hits(target, plan))
                for name, target in targets.items()
                if name != "direct"
            }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    first = next(iter(hits.values()))
    result.update(figures(tallies, first))
    del result["cache_hit_ms"]
    result["cache_hit_ms"] = {
        name: {**percentiles(r.samples.latency_ms if r.samples else []), "hit_ratio": r.hit_ratio}
        for name, r in hits.items()
    }
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    result = run(args, invocation(argv))
    if not args.json:
        print(summary_line(result))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

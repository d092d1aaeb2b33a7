"""Gateway overhead: the latency and cost hasten and the LiteLLM proxy add over a direct call.

All three targets front the same zero-latency simulator on loopback, in one run, measured by
the same in-process client (hasten's own load generator), with targets alternated round by
round so machine noise lands on all of them alike. A second hasten started with
``--no-metrics`` runs beside the first, so the cost of the metrics (``GET /metrics``, the
per-request observation) is measured in the same run. Prints one summary line plus JSON.

    .venv/bin/python bench/overhead/overhead.py [--quick] [--no-litellm] [--no-metrics-pair]
                                       [--workers N] [--upstream-client NAME]
                                       [--compare-clients] [--compare-src DIR]
                                       [--apis chat,responses,messages] [--no-portkey]
                                       [--json] [--write-docs]

``--workers N`` adds one more hasten target, ``hasten-Nw``: the same gateway served by
``hasten serve --workers N`` (its memory is the whole process tree).
``--upstream-client`` picks ``[server] upstream_client`` for the hasten targets (default:
hasten's default); ``--compare-clients`` adds one more hasten target, ``hasten-<other>``,
with the other client, so both are measured side by side in one run.
``--compare-src DIR`` adds ``hasten-base``: the same gateway run from another checkout's
``src`` (``PYTHONPATH=DIR``), so a change and its baseline are measured in one run (in
the ``--apis`` figures too, on the pass-through route).
``--apis`` (default all three): after the chat figures, what hasten (pass-through and
translated), LiteLLM and Portkey (npm ``@portkey-ai/gateway``, installed into bench/.npm)
add on chat, Responses and Messages side by side, against the simulator's native endpoints
(``bench/agents/api_overhead.py``, under ``"apis"``); ``--apis chat`` skips it.
The extra ``added_ms_vs_direct_stream`` figure is hasten's non-stream latency less the
direct *stream*'s whole answer: hasten asks non-stream requests upstream as a stream.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import orjson

from bench.agents import api_overhead
from bench.support import litellm_env, overhead_docs
from bench.support.overhead_figures import (
    NO_METRICS,
    THROUGHPUT_CONCURRENCY,
    Tally,
    figures,
    summary_line,
)
from bench.support.server_process import ServerProcess, clean_environment, free_port, invocation
from hasten.loadgen import LoadSettings, WorkloadSpec, run_load
from hasten.loadgen.cli import run_coroutine
from hasten.loadgen.report import LoadReport

REPO = Path(__file__).resolve().parents[2]
MODEL = litellm_env.MODEL_NAME
# Non-deterministic sampling makes hasten bypass its cache, so only the proxy path is timed.
BYPASS_TEMPERATURE = 0.7
READY_TIMEOUT_S = 120.0
IDLE_SETTLE_S = 1.0
BYTES_PER_MB = 1024 * 1024
UPSTREAM_CLIENT_NAMES = ("lean", "aiohttp")
BASE = "hasten-base"  # the --compare-src target


@dataclass(frozen=True, slots=True)
class Plan:
    num_rounds: int
    num_sequential: int  # per target per round
    num_warmup: int  # per target, once, before any round
    throughput_duration_s: float  # per target per round
    num_cache_hits: int


FULL_PLAN = Plan(
    num_rounds=5, num_sequential=200, num_warmup=200, throughput_duration_s=4.0, num_cache_hits=1000
)
QUICK_PLAN = Plan(
    num_rounds=2, num_sequential=40, num_warmup=40, throughput_duration_s=1.5, num_cache_hits=200
)


# Per API (bench/agents/api_overhead.py): rounds, sequential requests per target, warm-up.
API_PLANS = {False: (5, 100, 20), True: (2, 30, 10)}  # by --quick
API_NAMES = ("chat", "responses", "messages")


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    base_url: str
    processes: tuple[ServerProcess, ...]  # whose memory this target costs


def hasten_executable() -> list[str]:
    script = Path(sys.executable).parent / "hasten"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hasten.cli"]


@contextmanager
def started_servers(
    workdir: Path,
    *,
    with_litellm: bool,
    litellm_exe: Path | None,
    with_metrics_pair: bool = True,
    num_workers: int = 1,
    upstream_client: str | None = None,
    other_client: str | None = None,
    compare_src: Path | None = None,
) -> Iterator[tuple[dict[str, Target], dict[str, Any]]]:
    """Simulator, hasten (with metrics, and without them unless told not to) and
    (optionally) LiteLLM, started together, always stopped after."""
    env = clean_environment()
    hasten = hasten_executable()
    sim_port, hasten_port, litellm_port = free_port(), free_port(), free_port()
    workers_port = free_port()
    bare_port, other_port, base_port = free_port(), free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    client_flags = client_config(workdir, upstream_client)
    simulator = ServerProcess(
        "simulator",
        [*hasten, "simulate", "--host", "127.0.0.1", "--port", str(sim_port)],
        log_path=workdir / "simulator.log",
        env=env,
    )
    gateway = ServerProcess(
        "hasten",
        [*hasten, "serve", "--host", "127.0.0.1", "--port", str(hasten_port),
         "--upstream", f"{sim_url}/v1", "--sqlite-path", str(workdir / "cache.sqlite3"),
         "--log-level", "warning", *client_flags],
        log_path=workdir / "hasten.log",
        env=env,
    )  # fmt: skip
    workers = None
    if num_workers > 1:
        workers = ServerProcess(
            f"hasten-{num_workers}w",
            [*hasten, "serve", "--host", "127.0.0.1", "--port", str(workers_port),
             "--upstream", f"{sim_url}/v1", "--sqlite-path", str(workdir / "cache-w.sqlite3"),
             "--log-level", "warning", "--workers", str(num_workers), *client_flags],
            log_path=workdir / "hasten-workers.log",
            env=env,
        )  # fmt: skip
    bare = None
    if with_metrics_pair:
        bare = ServerProcess(
            NO_METRICS,
            [*hasten, "serve", "--host", "127.0.0.1", "--port", str(bare_port),
             "--upstream", f"{sim_url}/v1", "--sqlite-path", str(workdir / "bare.sqlite3"),
             "--log-level", "warning", "--no-metrics", *client_flags],
            log_path=workdir / "hasten-no-metrics.log",
            env=env,
        )  # fmt: skip
    other = None
    if other_client is not None:
        other = ServerProcess(
            f"hasten-{other_client}",
            [*hasten, "serve", "--host", "127.0.0.1", "--port", str(other_port),
             "--upstream", f"{sim_url}/v1", "--sqlite-path", str(workdir / "other.sqlite3"),
             "--log-level", "warning", *client_config(workdir, other_client)],
            log_path=workdir / "hasten-other.log",
            env=env,
        )  # fmt: skip
    base = None
    if compare_src is not None:
        base = ServerProcess(
            BASE,
            [*hasten, "serve", "--host", "127.0.0.1", "--port", str(base_port),
             "--upstream", f"{sim_url}/v1", "--sqlite-path", str(workdir / "base.sqlite3"),
             "--log-level", "warning", *client_flags],
            log_path=workdir / "hasten-base.log",
            env={**env, "PYTHONPATH": str(compare_src)},
        )  # fmt: skip
    litellm = None
    if with_litellm and litellm_exe is not None:
        config = litellm_env.write_config(workdir, f"{sim_url}/v1")
        litellm = ServerProcess(
            "litellm",
            litellm_env.command(litellm_exe, config, litellm_port),
            log_path=workdir / "litellm.log",
            env=litellm_env.environment(env),
        )
    processes = [
        p for p in (simulator, gateway, bare, workers, other, base, litellm) if p is not None
    ]
    with ExitStack() as stack:
        for process in processes:
            stack.callback(process.stop)
            process.start()
        simulator.wait_ready(f"{sim_url}/v1/models", READY_TIMEOUT_S)
        gateway.wait_ready(f"http://127.0.0.1:{hasten_port}/healthz", READY_TIMEOUT_S)
        targets = {
            "direct": Target("direct", f"{sim_url}/v1", (simulator,)),
            "hasten": Target("hasten", f"http://127.0.0.1:{hasten_port}/v1", (gateway,)),
        }
        if bare is not None:
            bare.wait_ready(f"http://127.0.0.1:{bare_port}/healthz", READY_TIMEOUT_S)
            targets[NO_METRICS] = Target(NO_METRICS, f"http://127.0.0.1:{bare_port}/v1", (bare,))
        if other is not None:
            other_url = f"http://127.0.0.1:{other_port}"
            other.wait_ready(f"{other_url}/healthz", READY_TIMEOUT_S)
            targets[other.name] = Target(other.name, f"{other_url}/v1", (other,))
        if base is not None:
            base_url = f"http://127.0.0.1:{base_port}"
            base.wait_ready(f"{base_url}/healthz", READY_TIMEOUT_S)
            targets[BASE] = Target(BASE, f"{base_url}/v1", (base,))
        if workers is not None:
            workers_url = f"http://127.0.0.1:{workers_port}"
            workers.wait_ready(f"{workers_url}/healthz", READY_TIMEOUT_S)
            targets[workers.name] = Target(workers.name, f"{workers_url}/v1", (workers,))
        servers: dict[str, Any] = {"commands": {p.name: p.argv for p in processes}}
        if litellm is not None:
            auth = {"Authorization": f"Bearer {litellm_env.MASTER_KEY}"}
            try:
                litellm.wait_ready(
                    f"http://127.0.0.1:{litellm_port}/health/liveliness", READY_TIMEOUT_S, auth
                )
            except RuntimeError as exc:
                # A comparison target that will not start must not cost us hasten's figures.
                servers["litellm_error"] = str(exc)
                litellm.stop()
            else:
                targets["litellm"] = Target(
                    "litellm", f"http://127.0.0.1:{litellm_port}/v1", (litellm,)
                )
        servers["ready_after_s"] = {
            p.name: round(p.ready_after_s, 2) for p in processes if p.ready_after_s is not None
        }
        yield targets, servers


def client_config(workdir: Path, name: str | None) -> list[str]:
    """``hasten serve`` flags for ``[server] upstream_client = name`` (none: the default)."""
    if name is None:
        return []
    path = workdir / f"client-{name}.toml"
    path.write_text(f'[server]\nupstream_client = "{name}"\n')
    return ["--config", str(path)]


def client_comparison(result: dict[str, Any], main_client: str) -> dict[str, Any]:
    """Per upstream client: added latency, throughput and (with LiteLLM) the ratio."""
    added, rps = result["added_ms"], result["throughput_rps"]
    litellm = added.get("litellm", {}).get("sequential")
    names = {"hasten": main_client} | {f"hasten-{c}": c for c in UPSTREAM_CLIENT_NAMES}
    rows: dict[str, Any] = {}
    for name, client in names.items():
        if name not in added:
            continue
        sequential = added[name]["sequential"]
        rows[client] = {
            "target": name,
            "added_sequential_ms": sequential,
            "throughput_rps": rps[name],
            "litellm_added_over_added_p50": None
            if litellm is None
            else _ratio(litellm["p50"], sequential["p50"]),
        }
    return rows


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator or denominator <= 0:
        return None
    return round(numerator / denominator, 1)


def settings_for(target: Target, seed: int, **changes: Any) -> LoadSettings:
    """The one request shape every target gets; only the base URL differs."""
    base: dict[str, Any] = {
        "base_url": target.base_url,
        "model": MODEL,
        "api_key": litellm_env.MASTER_KEY,
        "temperature": BYPASS_TEMPERATURE,
        "workload": WorkloadSpec(seed=seed, prompt_num_words=24),
        "seed": seed,
        "keep_samples": True,
        "timeout_s": 30.0,
    }
    base.update(changes)
    return LoadSettings(**base)


async def measure(targets: dict[str, Target], plan: Plan) -> dict[str, Tally]:
    names = list(targets)
    tallies = {name: Tally([], []) for name in names}
    for name in names:  # warm connection pools, imports, JITs of each server once
        warm = settings_for(targets[name], seed=1, num_requests=plan.num_warmup, concurrency=4)
        tallies[name].add_errors(await run_load(warm))
    for round_index in range(plan.num_rounds):
        # Rotate who goes first so slow drift in the machine does not favour one target.
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        seed = 100 + round_index
        for name in order:
            await measure_round(targets[name], tallies[name], plan, seed)
    return tallies


async def measure_round(target: Target, tally: Tally, plan: Plan, seed: int) -> None:
    sequential = await run_load(
        settings_for(target, seed, num_requests=plan.num_sequential, num_warmup=2)
    )
    stream = await run_load(
        settings_for(target, seed + 50, stream=True, num_requests=plan.num_sequential, num_warmup=2)
    )
    throughput = await run_load(
        settings_for(
            target,
            seed + 90,
            concurrency=THROUGHPUT_CONCURRENCY,
            num_requests=None,
            duration_s=plan.throughput_duration_s,
            num_warmup=THROUGHPUT_CONCURRENCY,
            keep_samples=False,
        )
    )
    assert sequential.samples is not None and stream.samples is not None
    tally.sequential_ms.extend(sequential.samples.latency_ms)
    tally.stream_ttft_ms.extend(stream.samples.ttft_ms)
    tally.stream_whole_ms.extend(stream.samples.latency_ms)
    tally.num_throughput_ok += throughput.num_ok
    tally.throughput_duration_s += throughput.duration_s
    tally.throughput_client_cpu_s += (
        (throughput.client_cpu_percent or 0.0) / 100 * throughput.duration_s
    )
    for report in (sequential, stream, throughput):
        tally.add_errors(report)


async def measure_cache_hits(target: Target, plan: Plan) -> LoadReport:
    """One prompt at temperature 0, repeated: the first call fills the cache, the rest hit."""
    settings = settings_for(
        target,
        seed=7,
        temperature=0.0,
        workload=WorkloadSpec(seed=7, num_unique=1),
        num_warmup=5,
        num_requests=plan.num_cache_hits,
    )
    return await run_load(settings)


def server_cpu_s(target: Target) -> float:
    return sum(process.cpu_s() for process in target.processes)


def rss_mb(targets: dict[str, Target]) -> dict[str, float]:
    """Resident memory per server process tree (the direct target's server is the simulator)."""
    time.sleep(IDLE_SETTLE_S)  # let in-flight work and GC settle before reading memory
    return {
        process.name: round(process.rss_bytes() / BYTES_PER_MB, 1)
        for target in targets.values()
        for process in target.processes
    }


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    result: dict[str, Any] = {
        "benchmark": "gateway_overhead",
        "command": command,
        "quick": args.quick,
    }
    litellm_exe = None
    if args.no_litellm:
        result["litellm"] = {"available": False, "reason": "--no-litellm"}
    else:
        install = litellm_env.ensure_installed()
        litellm_exe = install.executable
        result["litellm"] = {
            "available": install.executable is not None,
            "version": install.version,
            "install_s": None if install.install_s is None else round(install.install_s, 1),
            "reason": install.reason,
        }
    result["plan"] = {
        "num_rounds": plan.num_rounds,
        "num_sequential_per_round": plan.num_sequential,
        "num_warmup": plan.num_warmup,
        "throughput_duration_s_per_round": plan.throughput_duration_s,
        "num_cache_hits": plan.num_cache_hits,
    }
    result["machine"] = {
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        # Others' work on a shared box shows up in every p99; record how busy it was.
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }
    workdir = Path(tempfile.mkdtemp(prefix="hasten-overhead-"))
    try:
        with started_servers(
            workdir,
            with_litellm=litellm_exe is not None,
            litellm_exe=litellm_exe,
            with_metrics_pair=not args.no_metrics_pair,
            num_workers=args.workers,
            upstream_client=args.upstream_client,
            other_client=other_client(args),
            compare_src=args.compare_src,
        ) as (
            targets,
            servers,
        ):
            result["servers"] = servers
            if "litellm_error" in servers:
                result["litellm"].update(available=False, reason=servers["litellm_error"])
            rss_at_start_mb = rss_mb(targets)
            cpu_at_start_s = {name: server_cpu_s(t) for name, t in targets.items()}
            tallies = run_coroutine(measure(targets, plan))
            for name, target in targets.items():
                tallies[name].server_cpu_s = server_cpu_s(target) - cpu_at_start_s[name]
            result["rss_mb"] = {
                "idle_at_start": rss_at_start_mb,
                "idle_after_load": rss_mb(targets),
            }
            cache_hits = run_coroutine(measure_cache_hits(targets["hasten"], plan))
            result.update(figures(tallies, cache_hits))
            if args.compare_clients:
                result["upstream_clients"] = client_comparison(
                    result, args.upstream_client or "lean"
                )
        if set(args.apis) - {"chat"}:
            result["apis"] = api_figures(args, workdir / "apis", litellm_exe)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def api_figures(args: argparse.Namespace, workdir: Path, litellm_exe: Path | None) -> Any:
    """chat, Responses and Messages side by side: hasten, LiteLLM, Portkey (their own servers)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = clean_environment()

    def litellm(directory: Path, upstream_v1: str, port: int) -> api_overhead.Peer:
        assert litellm_exe is not None
        auth = {"authorization": f"Bearer {litellm_env.MASTER_KEY}",
                "x-api-key": litellm_env.MASTER_KEY}  # fmt: skip
        config = litellm_env.write_config(directory, upstream_v1)
        return api_overhead.Peer(
            "litellm",
            litellm_env.command(litellm_exe, config, port),
            litellm_env.environment(env), port, "/health/liveliness",
            {"Authorization": f"Bearer {litellm_env.MASTER_KEY}"}, API_NAMES, lambda api: auth,
        )  # fmt: skip

    num_rounds, num_sequential, num_warmup = API_PLANS[args.quick]
    return api_overhead.run(
        workdir, num_rounds=num_rounds, num_sequential=num_sequential, num_warmup=num_warmup,
        litellm=None if litellm_exe is None else litellm, with_portkey=not args.no_portkey,
        env=env, apis=tuple(args.apis), base_src=args.compare_src,
    )  # fmt: skip


def other_client(args: argparse.Namespace) -> str | None:
    if not args.compare_clients:
        return None
    main = args.upstream_client or "lean"
    return next(name for name in UPSTREAM_CLIENT_NAMES if name != main)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests: under a minute")
    parser.add_argument("--no-litellm", action="store_true", help="measure direct vs hasten only")
    parser.add_argument(
        "--no-metrics-pair",
        action="store_true",
        help="skip the second hasten (--no-metrics) that prices the metrics",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="also measure hasten serve --workers N (N > 1)"
    )
    parser.add_argument(
        "--upstream-client",
        choices=UPSTREAM_CLIENT_NAMES,
        default=None,
        help="[server] upstream_client of the hasten targets (default: hasten's)",
    )
    parser.add_argument(
        "--compare-clients",
        action="store_true",
        help="add a hasten target with the other upstream client, measured in the same run",
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="add hasten-base: the gateway run with PYTHONPATH=DIR (another checkout's src)",
    )
    parser.add_argument(
        "--apis",
        type=lambda text: [name for name in text.split(",") if name],
        default=list(API_NAMES),
        help="client APIs measured side by side (chat alone: the chat figures only)",
    )
    parser.add_argument("--no-portkey", action="store_true", help="no Portkey in the APIs' run")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        result = run(args, invocation(argv))
    except RuntimeError as exc:
        print(f"overhead benchmark failed: {exc}", file=sys.stderr)
        return 1
    if not args.json:
        line = summary_line(result)
        if "apis" in result:
            line += "; " + api_overhead.summary(result["apis"])
        print(line)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if args.write_docs:
        overhead_docs.write(REPO / "docs" / "benchmarks.md", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

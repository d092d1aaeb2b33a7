"""Key limits' cost on the request path: an unlimited key and a limited one, side by side.

One gateway with ``[fleet]`` on a loopback redis-server (limits counted by the Lua
scripts) and one without (counted in the process), both in front of one zero-latency
simulator; each server is its own process (this script with ``--serve``), so no two
share a GIL with each other or with the client. Each has an unlimited key, a key with
all four limits set far above the load (so nothing is denied: the cost of counting, not of
refusing), and one with only requests per minute (no settle call). Sequential non-stream
requests, interleaved series by series so machine noise lands on all; a miss is a fresh
question (an upstream call), an L1 hit the same question again. Reports client-side
p50/p90 per (gateway, key, kind) and the p50 each limited key adds to the unlimited one.

    .venv/bin/python bench/overhead/limits.py [--requests 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.support.server_process import ServerProcess, free_port  # noqa: E402
from hasten.app import HastenApp  # noqa: E402
from hasten.config import CacheConfig, GatewayConfig, TenantKey  # noqa: E402
from hasten.config.fleet import FleetConfig  # noqa: E402
from hasten.config.limits import KeyLimits  # noqa: E402
from hasten.config.prices import ModelPrice  # noqa: E402
from hasten.fleet.link import FleetLink  # noqa: E402
from hasten.limits.limiter import Limiter  # noqa: E402
from hasten.limits.shared_ledger import Settlement, SharedLedger  # noqa: E402
from hasten.server.connection import protocol_for  # noqa: E402
from hasten.simulator import SimConfig, build_app  # noqa: E402
from tests.support.gateway import make_config  # noqa: E402
from tests.support.servers import redis_server  # noqa: E402

NUM_WARMUP = 50
HIGH = 10**9
LIMITS = KeyLimits(
    requests_per_minute=HIGH, tokens_per_minute=HIGH, max_concurrent=HIGH, budget_usd=1e9
)
KEYS = {"unlimited": "sk-bench-free", "limited": "sk-bench-limited", "rpm": "sk-bench-rpm"}


def _config(sim_url: str, redis_url: str | None) -> GatewayConfig:
    base = make_config({"sim": sim_url + "/v1"}, cache=CacheConfig(backend="memory"))
    keys = (
        TenantKey("free", KEYS["unlimited"], key_id="free"),
        TenantKey("limited", KEYS["limited"], key_id="bench-limited", limits=LIMITS),
        # Requests per minute only: nothing to settle, one Redis call per request.
        TenantKey(
            "rpm", KEYS["rpm"], key_id="bench-rpm", limits=KeyLimits(requests_per_minute=HIGH)
        ),
    )
    fleet = FleetConfig(redis_url=redis_url) if redis_url else FleetConfig()
    prices = {"*": ModelPrice(input_usd_per_1m_tokens=1.0, output_usd_per_1m_tokens=2.0)}
    return replace(base, server=replace(base.server, api_keys=keys), fleet=fleet, prices=prices)


def _time_ms(client: httpx.Client, url: str, key: str, content: str) -> float:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": content}]}
    started_s = time.perf_counter()
    response = client.post(
        url + "/v1/chat/completions",
        json={**body, "temperature": 0},
        headers={"authorization": f"Bearer {key}"},
    )
    elapsed_ms = (time.perf_counter() - started_s) * 1000.0
    if response.status_code != 200:
        raise SystemExit(f"unexpected {response.status_code}: {response.text[:200]}")
    return elapsed_ms


def _summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 4),
        "p90_ms": round(values[int(len(values) * 0.9)], 4),
    }


async def _limiter_calls(redis_url: str, num_calls: int) -> dict[str, float]:
    """p50 of one admission and one settlement without HTTP around them: in Redis (the
    scripts' round trips: what a request without a ticket waits for, what a correction
    costs off the path) and in the process."""
    link = FleetLink(FleetConfig(redis_url=redis_url))
    shared = SharedLedger(link)
    local = Limiter()
    result = {}
    try:
        admit_ms, settle_ms, local_admit_ms, local_settle_ms = [], [], [], []
        for i in range(num_calls):
            started_s = time.perf_counter()
            await shared.admit("bench-calls", LIMITS, f"r{i}", 20, 30_000.0)
            admitted_s = time.perf_counter()
            await shared.settle("bench-calls", LIMITS, f"r{i}", 15, 1e-6)
            settled_s = time.perf_counter()
            admission = await local.reserve("bench-calls", LIMITS, f"r{i}", 20)
            local_s = time.perf_counter()
            settlement = Settlement(f"r{i}", LIMITS, 15, 1e-6)
            local.finish("bench-calls", LIMITS, admission, 20, settlement)
            local_settled_s = time.perf_counter()
            admit_ms.append((admitted_s - started_s) * 1000.0)
            settle_ms.append((settled_s - admitted_s) * 1000.0)
            local_admit_ms.append((local_s - settled_s) * 1000.0)
            local_settle_ms.append((local_settled_s - local_s) * 1000.0)
        for name, values in (
            ("redis_admit_ms", admit_ms),
            ("redis_settle_ms", settle_ms),
            ("local_admit_ms", local_admit_ms),
            ("local_settle_ms", local_settle_ms),
        ):
            result[name] = round(statistics.median(values), 4)
    finally:
        await local.aclose()
        await link.aclose()
    return result


def _serve(role: str, port: int, sim_url: str, redis_url: str) -> None:
    """The child process: the simulator or one gateway, under uvicorn on ``port``."""
    options: dict[str, Any] = {"host": "127.0.0.1", "port": port, "log_level": "warning"}
    if role == "sim":
        server_config = uvicorn.Config(build_app(SimConfig(output_tokens=16)), **options)
    else:
        config = _config(sim_url, redis_url if role == "redis" else None)
        http = protocol_for(config.server)
        server_config = uvicorn.Config(HastenApp(config), lifespan="on", http=http, **options)
    uvicorn.Server(server_config).run()


def _child(role: str, sim_url: str, redis_url: str, stack: ExitStack, log_dir: Path) -> str:
    """Starts one server process (stopped with ``stack``, even if it never gets ready)."""
    port = free_port()
    argv = [sys.executable, __file__, "--serve", role, "--port", str(port)]
    argv += ["--sim-url", sim_url, "--redis-url", redis_url]
    process = ServerProcess(role, argv, log_path=log_dir / f"{role}.log").start()
    stack.callback(process.stop)
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(url + ("/sim/stats" if role == "sim" else "/healthz"), timeout_s=60)
    return url


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300, help="per series per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--serve", choices=("sim", "redis", "local"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sim-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        _serve(args.serve, args.port, args.sim_url, args.redis_url)
        return
    fresh = itertools.count()
    samples: dict[str, list[float]] = {}
    with ExitStack() as stack:
        log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hasten-limits-")))
        redis_url = stack.enter_context(redis_server())
        sim_url = _child("sim", "", "", stack, log_dir)
        gateways = {
            name: _child(name, sim_url, redis_url, stack, log_dir) for name in ("redis", "local")
        }
        client = stack.enter_context(httpx.Client(timeout=30))
        series = [(g, k, kind) for g in gateways for k in KEYS for kind in ("miss", "hit")]
        for gateway, key, kind in series:
            _time_ms(client, gateways[gateway], KEYS[key], f"hot {key}")  # the hit's entry
            for _ in range(NUM_WARMUP):
                content = f"hot {key}" if kind == "hit" else f"fresh {next(fresh)}"
                _time_ms(client, gateways[gateway], KEYS[key], content)
        # Interleaved request by request: a noisy moment lands on every series alike.
        for _ in range(args.rounds * args.requests):
            for gateway, key, kind in series:
                content = f"hot {key}" if kind == "hit" else f"fresh {next(fresh)}"
                values = samples.setdefault(f"{gateway}/{key}/{kind}", [])
                values.append(_time_ms(client, gateways[gateway], KEYS[key], content))
        report_calls = asyncio.run(_limiter_calls(redis_url, args.rounds * args.requests))
    report: dict[str, object] = {name: _summary(v) for name, v in samples.items()}
    report["limiter_calls"] = report_calls
    added = {}
    for gateway in ("redis", "local"):
        for kind in ("miss", "hit"):
            free = statistics.median(samples[f"{gateway}/unlimited/{kind}"])
            for key in ("limited", "rpm"):
                limited = statistics.median(samples[f"{gateway}/{key}/{kind}"])
                name = f"{gateway}/{kind}" if key == "limited" else f"{gateway}/rpm-only/{kind}"
                added[name] = round(limited - free, 4)
    report["added_p50_ms"] = added
    calls = report_calls
    print(
        f"limits: added p50 with redis: miss {added['redis/miss']:+.3f} ms, "
        f"L1 hit {added['redis/hit']:+.3f} ms (requests-only key "
        f"{added['redis/rpm-only/miss']:+.3f} / {added['redis/rpm-only/hit']:+.3f} ms); "
        f"in-process: miss {added['local/miss']:+.3f} ms, L1 hit {added['local/hit']:+.3f} ms; "
        f"limiter alone p50 admit/settle: redis {calls['redis_admit_ms']:.3f}/"
        f"{calls['redis_settle_ms']:.3f} ms, in-process {calls['local_admit_ms']:.4f}/"
        f"{calls['local_settle_ms']:.4f} ms"
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

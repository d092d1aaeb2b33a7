"""What a ``max_tokens`` cap (a parameter policy) does to end-to-end latency.

A loopback simulator with a fixed time to first token and a fixed decode time per token
generates exactly ``max_tokens`` tokens, so a request's end-to-end latency is linear in its
output tokens. One gateway fronts it with four gateway keys: one tenant without a cap and
three whose ``[tenants.<name>.policy]`` caps ``max_tokens`` at 64, 128 and 256. The same
workload (``max_tokens`` drawn uniformly from 16 to 512, the same draws for every tenant)
runs through each key; the cache is off, so every request goes upstream. Prints one
summary line plus JSON: e2e p50/p99 per cap and the least-squares fit of e2e on output
tokens over every request (its slope should be the decode time per token).

    .venv/bin/python bench/overhead/max_tokens.py [--decode-ms 20] [--ttft-ms 50] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import aiohttp
import orjson

from bench.support.server_process import ServerProcess, clean_environment, free_port, invocation
from hasten.loadgen.stats import percentile

READY_TIMEOUT_S = 60.0
CAPS = (None, 64, 128, 256)
MIN_MAX_TOKENS, MAX_MAX_TOKENS = 16, 512
MODEL = "sim-model"


@dataclass(frozen=True, slots=True)
class Sample:
    cap: int | None
    asked_tokens: int
    output_tokens: int
    e2e_ms: float
    policy: str


def tenant_name(cap: int | None) -> str:
    return "nocap" if cap is None else f"cap{cap}"


def gateway_config(sim_url: str) -> str:
    keys = ", ".join(
        f'{{ tenant = "{tenant_name(c)}", api_key = "key-{tenant_name(c)}" }}' for c in CAPS
    )
    lines = [
        f'[server]\napi_keys = [{keys}]\nlog_level = "warning"',
        f'[upstreams.sim]\nurl = "{sim_url}/v1"',
        '[models."*"]\nupstream = "sim"',
        "[cache]\nenabled = false",
    ]
    lines += [f"[tenants.cap{c}.policy]\nmax_tokens_cap = {c}" for c in CAPS if c is not None]
    return "\n".join(lines) + "\n"


async def one_request(
    session: aiohttp.ClientSession, url: str, cap: int | None, asked: int, index: int
) -> Sample:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"request {index}: write about caps"}],
        "max_tokens": asked,
    }
    headers = {"authorization": f"Bearer key-{tenant_name(cap)}"}
    started_s = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as response:
        payload = await response.json()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {payload}")
        policy = response.headers.get("x-hasten-policy", "")
    e2e_ms = (time.perf_counter() - started_s) * 1000.0
    return Sample(cap, asked, int(payload["usage"]["completion_tokens"]), e2e_ms, policy)


async def run_cap(url: str, cap: int | None, asked: list[int], concurrency: int) -> list[Sample]:
    limit = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def limited(index: int, tokens: int) -> Sample:
            async with limit:
                return await one_request(session, url, cap, tokens, index)

        return list(await asyncio.gather(*(limited(i, t) for i, t in enumerate(asked))))


def fit(samples: list[Sample]) -> dict[str, float]:
    """Least squares e2e_ms = intercept + slope * output_tokens, with r squared."""
    xs = [float(s.output_tokens) for s in samples]
    ys = [s.e2e_ms for s in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_total = sum((y - mean_y) ** 2 for y in ys)
    ss_residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return {
        "slope_ms_per_token": round(slope, 3),
        "intercept_ms": round(intercept, 1),
        "r_squared": round(1.0 - ss_residual / ss_total, 5),
    }


def summarize(cap: int | None, samples: list[Sample]) -> dict[str, Any]:
    e2e = sorted(s.e2e_ms for s in samples)
    return {
        "cap": cap,
        "num_requests": len(samples),
        "mean_output_tokens": round(sum(s.output_tokens for s in samples) / len(samples), 1),
        "max_output_tokens": max(s.output_tokens for s in samples),
        "num_capped": sum(1 for s in samples if "(cap)" in s.policy),
        "e2e_p50_ms": round(percentile(e2e, 0.5), 1),
        "e2e_p99_ms": round(percentile(e2e, 0.99), 1),
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    asked = [rng.randint(MIN_MAX_TOKENS, MAX_MAX_TOKENS) for _ in range(args.num_requests)]
    everything: list[Sample] = []
    per_cap = []
    for cap in CAPS:
        samples = await run_cap(url, cap, asked, args.concurrency)
        everything += samples
        per_cap.append(summarize(cap, samples))
    return {"per_cap": per_cap, "fit": fit(everything)}


def summary_line(result: dict[str, Any], decode_ms: float) -> str:
    parts = [
        f"{'no cap' if r['cap'] is None else 'cap ' + str(r['cap'])}: p50 {r['e2e_p50_ms']:.0f} "
        f"ms, p99 {r['e2e_p99_ms']:.0f} ms"
        for r in result["per_cap"]
    ]
    slope = result["fit"]["slope_ms_per_token"]
    return (
        f"max_tokens caps ({decode_ms:g} ms/token decode): "
        + "; ".join(parts)
        + f"; fit e2e = {result['fit']['intercept_ms']:.0f} ms + {slope:.2f} ms/token "
        f"(r2 {result['fit']['r_squared']:.4f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-ms", type=float, default=20.0, help="simulator ms per token")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="simulator first token")
    parser.add_argument("--num-requests", type=int, default=24, help="per cap")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="8 requests per cap")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
    if args.quick:
        args.num_requests = 8
    env = clean_environment()
    hasten = [sys.executable, "-m", "hasten"]
    sim_port, gateway_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    with tempfile.TemporaryDirectory(prefix="hasten-bench-max-tokens-") as tmp:
        workdir = Path(tmp)
        config = workdir / "hasten.toml"
        config.write_text(gateway_config(sim_url), encoding="utf-8")
        simulator = ServerProcess(
            "simulator",
            [*hasten, "simulate", "--host", "127.0.0.1", "--port", str(sim_port),
             "--decode-ms", str(args.decode_ms), "--ttft-ms", str(args.ttft_ms)],
            log_path=workdir / "simulator.log",
            env=env,
        )  # fmt: skip
        gateway = ServerProcess(
            "hasten",
            [*hasten, "serve", "--host", "127.0.0.1", "--port", str(gateway_port),
             "--config", str(config)],
            log_path=workdir / "hasten.log",
            env=env,
        )  # fmt: skip
        try:
            simulator.start()
            gateway.start()
            simulator.wait_ready(f"{sim_url}/v1/models", READY_TIMEOUT_S)
            gateway.wait_ready(f"http://127.0.0.1:{gateway_port}/healthz", READY_TIMEOUT_S)
            url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
            result = asyncio.run(measure(url, args))
        finally:
            gateway.stop()
            simulator.stop()
    result["setup"] = {
        "decode_ms_per_token": args.decode_ms,
        "ttft_ms": args.ttft_ms,
        "num_requests_per_cap": args.num_requests,
        "concurrency": args.concurrency,
        "max_tokens_asked": f"uniform {MIN_MAX_TOKENS}..{MAX_MAX_TOKENS}, seed {args.seed}",
        "command": invocation(sys.argv[1:]),
    }
    if not args.json:
        print(summary_line(result, args.decode_ms))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())

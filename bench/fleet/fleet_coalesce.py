"""What cross-replica coalescing costs a miss and an exact L1 hit, Redis on loopback.

Two gateways in front of one zero-latency simulator, one with ``[fleet]`` (a real
redis-server on loopback, coalescing on), one without, taking turns on sequential requests
in one run: cache misses (a fresh prompt each, non-stream and stream) and exact L1 hits (a
prompt answered once before). Prints one summary line, then JSON with the median and p90
of the client's round trip and of the gateway's own ``server-timing`` per case.

    .venv/bin/python bench/fleet/fleet_coalesce.py [--num-requests 400] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hasten.config import CacheConfig
from hasten.config.fleet import FleetConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread, redis_server

CASES = ("miss", "stream miss", "L1 hit")
WARMUP = 20


def _gateway_ms(response: httpx.Response) -> float:
    timing = response.headers["server-timing"]
    return float(timing.split("hasten;dur=")[1].split(",")[0])


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values), 4),
        "p90_ms": round(statistics.quantiles(values, n=10)[8], 4),
    }


def _body(name: str, case: str, i: int) -> dict[str, Any]:
    prompt = "the hit prompt" if case == "L1 hit" else f"{name} {case} question {i}"
    return {
        "model": "sim-model",
        "temperature": 0,
        "stream": case == "stream miss",
        "messages": [{"role": "user", "content": prompt}],
    }


def _ask(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, httpx.Response]:
    started_s = time.perf_counter()
    response = client.post(url + "/v1/chat/completions", json=body)
    response.read()
    elapsed_ms = (time.perf_counter() - started_s) * 1000.0
    if response.status_code != 200:
        raise SystemExit(f"unexpected status {response.status_code}: {response.text[:200]}")
    return elapsed_ms, response


def _redis_rtt_ms(redis_url: str, gap_s: float, num_ops: int = 400) -> float:
    """The p50 of one SET NX PX from redis-py's asyncio client, ``gap_s`` apart.

    Back to back it is the round trip of a busy Redis; with a gap like the one between two
    sequential misses it also pays for waking an idle redis-server and client, as a miss
    here does: the floor of what a miss can cost.
    """

    async def measure() -> float:
        client = Redis.from_url(redis_url)
        times: list[float] = []
        for i in range(num_ops):
            if gap_s:
                await asyncio.sleep(gap_s)
            started_s = time.perf_counter()
            await client.set(f"bench:rtt:{gap_s}:{i}", "x", nx=True, px=2000)
            times.append((time.perf_counter() - started_s) * 1000.0)
        await client.aclose()
        return statistics.median(times[num_ops // 10 :])

    return round(asyncio.run(measure()), 4)


def _run(targets: dict[str, str], num_requests: int) -> dict[str, Any]:
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {case: {"round_trip": [], "gateway": []} for case in CASES} for name in targets
    }
    with httpx.Client(timeout=30) as client:
        for i in range(num_requests + WARMUP):
            for case in CASES:
                # Which gateway goes first alternates, so neither pays for the other's wake-up.
                order = list(targets.items())
                for name, url in order if i % 2 else order[::-1]:
                    elapsed_ms, response = _ask(client, url, _body(name, case, i))
                    expected = "hit" if case == "L1 hit" and i else "miss"
                    if response.headers["x-hasten-cache"] != expected:
                        raise SystemExit(f"{name} {case}: x-hasten-cache is not {expected}")
                    if i >= WARMUP:
                        samples[name][case]["round_trip"].append(elapsed_ms)
                        samples[name][case]["gateway"].append(_gateway_ms(response))
    return {
        name: {case: {k: _summary(v) for k, v in kinds.items()} for case, kinds in cases.items()}
        for name, cases in samples.items()
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=400, help="per gateway and case")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per answer")
    args = parser.parse_args(argv)
    cache = CacheConfig(backend="memory")
    with (
        redis_server() as redis_url,
        ServerThread(build_app(SimConfig(output_tokens=args.tokens))) as sim,
    ):
        off = make_config({"sim": sim.url + "/v1"}, cache=cache)
        on = replace(off, fleet=FleetConfig(redis_url=redis_url))
        with running_gateway(on) as fleet, running_gateway(off) as single:
            result = _run({"fleet": fleet.url, "single": single.url}, args.num_requests)
            rtt = {
                "busy": _redis_rtt_ms(redis_url, 0.0),
                "idle_5ms": _redis_rtt_ms(redis_url, 0.005),
            }
    added = {
        case: {
            kind: round(
                result["fleet"][case][kind]["p50_ms"] - result["single"][case][kind]["p50_ms"], 4
            )
            for kind in ("round_trip", "gateway")
        }
        for case in CASES
    }
    print(
        "fleet coalescing, added p50 (round trip / gateway): "
        + ", ".join(
            f"{case} {added[case]['round_trip']:+.3f} / {added[case]['gateway']:+.3f} ms"
            for case in CASES
        )
        + f"; one Redis SET NX PX {rtt['busy']:.3f} ms back to back, {rtt['idle_5ms']:.3f} ms"
        + f" 5 ms apart ({args.num_requests} requests per case)"
    )
    summary = {"num_requests": args.num_requests, "redis_set_nx_p50_ms": rtt}
    print(json.dumps({**summary, "added_p50_ms": added, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

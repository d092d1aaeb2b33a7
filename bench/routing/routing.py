"""Tail-latency routing: hasten with and without hedging, LiteLLM's latency-based routing, and
direct calls, against three simulated deployments (log-normal TTFT around 300 ms, 3% stragglers
at 10x); one deployment degrades to 5x its TTFT half-way through each target's run. Then prefix
affinity over four prefix-caching deployments, against the same fleet without affinity.

    .venv/bin/python bench/routing/routing.py [--quick] [--no-litellm] [--affinity-only] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import aiohttp
import orjson

from bench.support import litellm_env
from bench.support.routing_setup import (
    CACHE_SIMS,
    HEDGE_BUDGET_BURST,
    TAIL_SIMS,
    Fleet,
    started_fleet,
)
from hasten.apis.chat import CHAT_API
from hasten.config.routing import HedgeConfig
from hasten.loadgen.stats import percentile
from hasten.upstream.attempt import FirstTokenWatch

REPO = Path(__file__).resolve().parents[2]
CONCURRENCY = 8
DEGRADED_SIM = "c"
DEGRADED_TTFT_MS = 1500.0  # 5x the healthy 300 ms
MOVE_WINDOW = 20
NUM_PREFIXES = 16
PREFIX_WORDS = 800


@dataclass
class Sample:
    index: int
    ttft_ms: float
    e2e_ms: float
    upstream: str
    hedge: str


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    num_errors: int = 0


async def one_request(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, float, str, str]:
    started_s = time.perf_counter()
    ttft_ms = None
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {(await response.text())[:200]}")
        watch = FirstTokenWatch(CHAT_API)
        async for chunk in response.content.iter_any():
            if ttft_ms is None and watch.feed(chunk):
                ttft_ms = (time.perf_counter() - started_s) * 1000.0
        upstream = response.headers.get("x-hasten-upstream", "")
        hedge = response.headers.get("x-hasten-hedge", "")
    e2e_ms = (time.perf_counter() - started_s) * 1000.0
    return (ttft_ms if ttft_ms is not None else e2e_ms), e2e_ms, upstream, hedge


async def drive(
    requests: list[tuple[str, dict[str, Any], dict[str, str]]],
    *,
    on_index: dict[int, Any] | None = None,
) -> Run:
    """Closed loop at CONCURRENCY; ``on_index[i]`` is awaited before request i is sent."""
    run = Run()
    queue = list(enumerate(requests))
    queue.reverse()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            while queue:
                index, (url, body, headers) = queue.pop()
                if on_index and index in on_index:
                    await on_index[index]()
                try:
                    ttft, e2e, upstream, hedge = await one_request(session, url, body, headers)
                except (RuntimeError, aiohttp.ClientError, TimeoutError):
                    run.num_errors += 1
                    continue
                run.samples.append(Sample(index, ttft, e2e, upstream, hedge))

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return run


async def sim_post(session: aiohttp.ClientSession, url: str, payload: dict[str, Any]) -> Any:
    async with session.post(url, json=payload) as response:
        return await response.json()


async def reset_sims(fleet: Fleet, names: tuple[str, ...], config: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        for name in names:
            await sim_post(session, f"{fleet.sims[name]}/sim/config", config)
            await sim_post(session, f"{fleet.sims[name]}/sim/reset?clear_prefix_cache=1", {})


async def sim_totals(fleet: Fleet, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        totals = {}
        for name in names:
            async with session.get(f"{fleet.sims[name]}/sim/stats") as response:
                totals[name] = await response.json()
        return totals


def tail_body(index: int) -> dict[str, Any]:
    words = " ".join(random.Random(index).choice(("alpha", "beta", "gamma")) for _ in range(12))
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": f"question {index}: {words}"}],
        "stream": True,
        "temperature": 0.7,
    }


def tail_requests(
    target: str, fleet: Fleet, num: int
) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    rng = random.Random(42)
    requests = []
    for index in range(num):
        body = tail_body(index)
        headers: dict[str, str] = {}
        if target == "direct":
            url = f"{fleet.sims[rng.choice(TAIL_SIMS)]}/v1/chat/completions"
        elif target == "litellm":
            url = f"{fleet.litellm_url}/v1/chat/completions"
            headers["authorization"] = f"Bearer {litellm_env.MASTER_KEY}"
        else:
            url = f"{fleet.gateway_url}/v1/chat/completions"
            body["model"] = "sim-model" if target == "hasten_hedging" else "sim-nohedge"
        requests.append((url, body, headers))
    return requests


async def tail_phase(fleet: Fleet, target: str, num: int) -> dict[str, Any]:
    await reset_sims(fleet, TAIL_SIMS, {"ttft_base_ms": 300.0})
    degrade_at = num // 2
    before: dict[str, Any] = {}

    async def degrade() -> None:
        before.update(await sim_totals(fleet, (DEGRADED_SIM,)))
        async with aiohttp.ClientSession() as session:
            url = f"{fleet.sims[DEGRADED_SIM]}/sim/config"
            await sim_post(session, url, {"ttft_base_ms": DEGRADED_TTFT_MS})

    started_s = time.perf_counter()
    run = await drive(tail_requests(target, fleet, num), on_index={degrade_at: degrade})
    duration_s = time.perf_counter() - started_s
    totals = await sim_totals(fleet, TAIL_SIMS)
    num_upstream = sum(t["num_requests"] for t in totals.values())
    degraded_after = totals[DEGRADED_SIM]["num_requests"] - before[DEGRADED_SIM]["num_requests"]
    return {
        "num_requests": len(run.samples) + run.num_errors,
        "num_errors": run.num_errors,
        "duration_s": round(duration_s, 1),
        "ttft_ms": summary([s.ttft_ms for s in run.samples]),
        "e2e_ms": summary([s.e2e_ms for s in run.samples]),
        "upstream_requests": num_upstream,
        "extra_upstream_requests_pct": round(100.0 * (num_upstream / max(1, num) - 1.0), 2),
        "num_hedges": sum(hedges_sent(s.hedge) for s in run.samples),
        "hedges_by_level": hedges_by_level(run.samples),
        "degraded_share_of_upstream_requests_after_pct": round(
            100.0 * degraded_after / max(1, num - degrade_at), 1
        ),
        "moved_away": moved_away(run.samples, degrade_at),
        "hedges_per_half": hedges_per_half(run.samples, degrade_at),
        "p99_tail": tail_of(run.samples, 0.99),
        "p999_tail": tail_of(run.samples, 0.999),
    }


# x-hasten-hedge: the hedges a request sent ("denied": the first was refused by the budget).
HEDGES_SENT = {"won": 1, "lost": 1, "won:1": 2, "won:2": 2, "lost:2": 2}


def hedges_sent(outcome: str) -> int:
    return HEDGES_SENT.get(outcome, 0)


def hedges_by_level(samples: list[Sample]) -> dict[str, int]:
    """Requests by how many hedges they sent, and the second hedges that won."""
    counts = {"one": 0, "two": 0, "second_won": 0}
    for s in samples:
        sent = hedges_sent(s.hedge)
        if sent:
            counts["one" if sent == 1 else "two"] += 1
        counts["second_won"] += s.hedge == "won:2"
    return counts


def moved_away(samples: list[Sample], degrade_at: int) -> dict[str, Any] | None:
    """How fast answers left the degraded deployment: requests (in send order after it
    degraded) until a window of MOVE_WINDOW requests holds at most one of its answers, and
    its share of answers over the rest of the run (periodic re-tries included)."""
    after = sorted((s for s in samples if s.index >= degrade_at), key=lambda s: s.index)
    if not after or not any(s.upstream for s in after):
        return None  # the target does not say which deployment answered
    hits = [s.upstream == DEGRADED_SIM for s in after]
    within = next((i for i in range(len(hits)) if sum(hits[i : i + MOVE_WINDOW]) <= 1), None)
    rest = hits[within:] if within is not None else hits
    return {
        "within_requests": within,
        "answers_in_first_20": sum(hits[:MOVE_WINDOW]),
        "share_after_pct": round(100.0 * sum(rest) / max(1, len(rest)), 1),
    }


def hedges_per_half(samples: list[Sample], degrade_at: int) -> dict[str, dict[str, int]]:
    """x-hasten-hedge outcomes ("" = none wanted) before and after the degradation."""
    halves: dict[str, dict[str, int]] = {"before": {}, "after": {}}
    for s in samples:
        half = halves["after" if s.index >= degrade_at else "before"]
        half[s.hedge or "none"] = half.get(s.hedge or "none", 0) + 1
    return halves


def tail_of(samples: list[Sample], fraction: float) -> dict[str, int]:
    """Who answered the requests at or above this TTFT percentile, and what their hedges
    did: the requests that make up the tail (a hedge "denied" by the budget, say)."""
    ordered = sorted(s.ttft_ms for s in samples)
    if not ordered:
        return {}
    threshold_ms = percentile(ordered, fraction)
    tail: dict[str, int] = {}
    for s in samples:
        if s.ttft_ms >= threshold_ms:
            key = f"{s.upstream or '?'}:{s.hedge or 'none'}"
            tail[key] = tail.get(key, 0) + 1
    return tail


def summary(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p99": None, "p99.9": None, "mean": None}
    return {
        "p50": round(percentile(ordered, 0.50), 1),
        "p99": round(percentile(ordered, 0.99), 1),
        "p99.9": round(percentile(ordered, 0.999), 1),
        "mean": round(sum(ordered) / len(ordered), 1),
    }


def prefix_text(prefix: int) -> str:
    rng = random.Random(1000 + prefix)
    words = ("cache", "prefix", "token", "route", "gateway", "latency", "model", "shard")
    return f"system prompt {prefix}: " + " ".join(rng.choice(words) for _ in range(PREFIX_WORDS))


async def affinity_phase(fleet: Fleet, model: str, num: int) -> dict[str, Any]:
    await reset_sims(fleet, CACHE_SIMS, {})
    rng = random.Random(7)
    prompts = [prefix_text(p) for p in range(NUM_PREFIXES)]
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
    for index in range(num):
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": prompts[rng.randrange(NUM_PREFIXES)]},
                {"role": "user", "content": f"question number {index}, briefly"},
            ],
            "stream": True,
            "temperature": 0.7,
        }
        requests.append((f"{fleet.gateway_url}/v1/chat/completions", body, {}))
    run = await drive(requests)
    totals = await sim_totals(fleet, CACHE_SIMS)
    prompt_tokens = sum(t["num_prompt_tokens"] for t in totals.values())
    hit_tokens = sum(t["num_prefix_cache_hit_tokens"] for t in totals.values())
    return {
        "num_requests": num,
        "num_errors": run.num_errors,
        "prefix_cache_hit_ratio": round(hit_tokens / max(1, prompt_tokens), 4),
        "ttft_ms": summary([s.ttft_ms for s in run.samples]),
        "requests_per_deployment": {n: t["num_requests"] for n, t in totals.items()},
    }


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    num_tail = 240 if args.quick else 2000
    num_affinity = 128 if args.quick else 800
    result: dict[str, Any] = {
        "benchmark": "routing",
        "command": command,
        "quick": args.quick,
        "setup": {
            "concurrency": CONCURRENCY,
            "tail_requests_per_target": num_tail,
            "affinity_requests_per_mode": num_affinity,
            "degraded": f"{DEGRADED_SIM}: ttft 300 -> {DEGRADED_TTFT_MS:g} ms "
            f"at request {num_tail // 2}",
            "hedge": {
                "max_delay_ms": 1000,
                "budget_burst": HEDGE_BUDGET_BURST,
                "max_hedges": HedgeConfig().max_hedges,
            },
            "machine_cores": os.cpu_count(),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        },
    }
    litellm_exe = None
    if not args.no_litellm and not args.affinity_only:
        install = litellm_env.ensure_installed()
        litellm_exe = install.executable
        result["litellm_version"] = install.version
    hasten = [str(Path(sys.executable).parent / "hasten")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HASTEN_")}
    workdir = Path(tempfile.mkdtemp(prefix="hasten-routing-"))
    try:
        with started_fleet(workdir, hasten, env, litellm_exe) as fleet:
            result["litellm_error"] = fleet.litellm_error
            targets = ["hasten_hedging", "hasten_no_hedging", "direct"]
            if fleet.litellm_url is not None:
                targets.insert(2, "litellm_latency_routing")
            if args.affinity_only:
                targets = []
            tail = {}
            for target in targets:
                name = "litellm" if target.startswith("litellm") else target
                tail[target] = asyncio.run(tail_phase(fleet, name, num_tail))
            result["tail"] = tail
            result["affinity"] = {
                model: asyncio.run(affinity_phase(fleet, model, num_affinity))
                for model in ("sim-affinity", "sim-spread")
            }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["goals"] = {} if args.affinity_only else goals(result)
    return result


def goals(result: dict[str, Any]) -> dict[str, Any]:
    tail = result["tail"]
    hedged, plain = tail["hasten_hedging"], tail["hasten_no_hedging"]
    p99_ratio = (plain["ttft_ms"]["p99"] or 0) / max(1e-9, hedged["ttft_ms"]["p99"] or 0)
    p999_ratio = (plain["ttft_ms"]["p99.9"] or 0) / max(1e-9, hedged["ttft_ms"]["p99.9"] or 0)
    affinity = result["affinity"]
    ttft_gain = (affinity["sim-spread"]["ttft_ms"]["mean"] or 0) / max(
        1e-9, affinity["sim-affinity"]["ttft_ms"]["mean"] or 0
    )
    moved = plain["moved_away"] or {}
    return {
        "p99_ttft_no_hedge_over_hedge": round(p99_ratio, 2),
        "p999_ttft_no_hedge_over_hedge": round(p999_ratio, 2),
        "hedge_extra_upstream_requests_pct": hedged["extra_upstream_requests_pct"],
        "hedges_by_level": hedged["hedges_by_level"],
        "moved_away_within_requests_no_hedge": moved.get("within_requests"),
        "affinity_hit_ratio": affinity["sim-affinity"]["prefix_cache_hit_ratio"],
        "no_affinity_hit_ratio": affinity["sim-spread"]["prefix_cache_hit_ratio"],
        "affinity_mean_ttft_gain_x": round(ttft_gain, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests: under 2 minutes")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM target")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument(
        "--affinity-only", action="store_true", help="only the prefix-affinity test (~3 min)"
    )
    args = parser.parse_args()
    command = shlex.join([".venv/bin/python", "bench/routing/routing.py", *sys.argv[1:]])
    result = run(args, command)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(orjson.dumps(result["goals"]).decode())
        print(orjson.dumps(result["tail"], option=orjson.OPT_INDENT_2).decode())
        print(orjson.dumps(result["affinity"], option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

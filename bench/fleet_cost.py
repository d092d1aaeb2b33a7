"""What ``[fleet]`` costs one replica on the hot path: a miss and an exact L1 hit, a replica
without ``[fleet]`` and one with it (Redis on loopback), side by side in one run.

One zero-latency simulator behind both (and measured directly, for the added latency of a
miss); the same in-process load generator as bench/overhead.py, sequential requests, the
targets taking turns round by round so machine noise lands on all of them alike. Both
replicas keep the exact cache in memory (L1 only): the difference between them is
``[fleet]`` and nothing else. Used by bench/fleet.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overhead_figures import percentiles

from hasten.loadgen import LoadSettings, WorkloadSpec, run_load
from hasten.loadgen.cli import run_coroutine
from tests.support.fleet import fleet_table
from tests.support.servers import GatewayProcess, SimulatorProcess, redis_server

MODEL = "sim-model"
DIRECT = "direct"
SINGLE = "single"  # one replica, no [fleet]
FLEET = "fleet"  # one replica with [fleet] redis_url
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class CostPlan:
    num_rounds: int
    num_requests: int  # per target, per kind, per round


FULL_COST = CostPlan(num_rounds=20, num_requests=100)
QUICK_COST = CostPlan(num_rounds=4, num_requests=50)


def replica_config(sim_url: str, redis_url: str | None) -> str:
    text = f'[upstreams.sim]\nurl = "{sim_url}"\n[models."*"]\nupstream = "sim"\n'
    text += '[cache]\nbackend = "memory"\n'
    return text if redis_url is None else text + fleet_table(redis_url)


@contextmanager
def cost_targets(workdir: Path) -> Iterator[dict[str, str]]:
    """Base URLs (with /v1): the simulator, a plain replica and a fleet replica."""
    with ExitStack() as stack:
        redis_url = stack.enter_context(redis_server())
        sim = stack.enter_context(SimulatorProcess())
        replicas: dict[str, GatewayProcess] = {}
        for name, url in ((SINGLE, None), (FLEET, redis_url)):
            path = workdir / f"{name}.toml"
            path.write_text(replica_config(sim.url, url))
            replicas[name] = GatewayProcess(
                "--host", "127.0.0.1", "--config", str(path), "--log-level", "warning"
            )
            stack.callback(replicas[name].stop)
        with ThreadPoolExecutor(max_workers=len(replicas)) as pool:
            for future in [pool.submit(r.start, READY_TIMEOUT_S) for r in replicas.values()]:
                future.result()
        targets = {DIRECT: sim.url}
        targets.update({name: f"{r.url}/v1" for name, r in replicas.items()})
        yield targets


def _settings(base_url: str, workload: WorkloadSpec, num_requests: int) -> LoadSettings:
    return LoadSettings(
        base_url=base_url,
        model=MODEL,
        temperature=0.0,  # cacheable: a miss takes the path coalescing adds to
        workload=workload,
        num_requests=num_requests,
        num_warmup=2,
        keep_samples=True,
        timeout_s=30.0,
    )


async def _measure(targets: dict[str, str], plan: CostPlan) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {name: {"miss": [], "hit": []} for name in targets}
    names = list(targets)
    for name in names:  # warm imports, pools and each replica's first-request paths once
        await run_load(_settings(targets[name], WorkloadSpec(seed=1), plan.num_requests // 2))
    for index in range(plan.num_rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            # A fresh prompt every request (a new seed each round): every one a cache miss.
            misses = await run_load(
                _settings(targets[name], WorkloadSpec(seed=100 + index), plan.num_requests)
            )
            _keep(samples[name]["miss"], misses.samples)
            if name == DIRECT:
                continue
            hits = await run_load(
                _settings(targets[name], WorkloadSpec(seed=7, num_unique=1), plan.num_requests)
            )
            _keep(samples[name]["hit"], hits.samples)
    return samples


def _keep(into: list[float], samples: Any) -> None:
    if samples is None:
        raise RuntimeError("the load generator kept no samples")
    into.extend(samples.latency_ms)


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    return {
        key: None if a[key] is None or b[key] is None else round(a[key] - b[key], 3)
        for key in ("p50", "p99")
    }


def measure_cost(plan: CostPlan) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="hasten-fleet-cost-"))
    with cost_targets(workdir) as targets:
        samples = run_coroutine(_measure(targets, plan))
    latency = {
        name: {kind: percentiles(values) for kind, values in kinds.items() if values}
        for name, kinds in samples.items()
    }
    return {
        "plan": {"num_rounds": plan.num_rounds, "num_requests": plan.num_requests},
        "latency_ms": latency,
        "added_to_miss_ms": {
            name: _delta(latency[name]["miss"], latency[DIRECT]["miss"]) for name in (SINGLE, FLEET)
        },
        "fleet_minus_single_ms": {
            kind: _delta(latency[FLEET][kind], latency[SINGLE][kind]) for kind in ("miss", "hit")
        },
    }

"""What ``[fleet]`` costs one replica on the hot path: a miss and an exact L1 hit, a replica
without ``[fleet]`` and one with it (Redis on loopback), side by side in one run.

One zero-latency simulator behind both (and measured directly, for the added latency of a
miss); the same in-process load generator as bench/overhead/overhead.py, sequential requests, the
targets taking turns round by round so machine noise lands on all of them alike. The main
pair keeps the exact cache in memory (L1 only): the difference between them is ``[fleet]``
and nothing else. Two more pairs keep it as replicas really run: shared through Redis (as
replicas ran before ``[fleet]``), and in the default tiers (L1, then the replica's own
SQLite file). Used by bench/fleet/fleet.py.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.fleet_paired import measure_paired, paired_figures
from bench.support.overhead_figures import percentiles
from hasten.loadgen import LoadSettings, WorkloadSpec, run_load
from hasten.loadgen.cli import run_coroutine
from tests.support.fleet import fleet_table
from tests.support.servers import GatewayProcess, ProcessDied, SimulatorProcess, redis_server

MODEL = "sim-model"
DIRECT = "direct"
SINGLE = "single"  # one replica, no [fleet]
FLEET = "fleet"  # one replica with [fleet] redis_url
LIMITED = "fleet+limits"  # and a gateway key with limits far above the load (never a 429)
RATE = "fleet+rate"  # a key limited in requests per minute only (far above the load)
CONC = "fleet+conc"  # a key limited in concurrent requests only (far above the load)
SPEND = "fleet+spend"  # a key with a spend budget only (far above the load)
RESUME = "fleet+resume"  # [fleet] and stream resume on for the model
# The same keys on a replica without [fleet] (counted on the replica alone): what sharing
# the counts through Redis adds to a limited key's request, against a single replica.
SINGLE_LIMITED = "single+limits"
SINGLE_RATE = "single+rate"
SINGLE_CONC = "single+conc"
SINGLE_SPEND = "single+spend"
# The same two with the exact cache shared through Redis (L1, then a Redis L2), as replicas
# ran before [fleet]: what [fleet] adds to that setup, where a miss already asks Redis.
SINGLE_L2 = "single+l2"
FLEET_L2 = "fleet+l2"
# And with the default cache tiers (L1, then a SQLite file of the replica's own).
SINGLE_SQLITE = "single+sqlite"
FLEET_SQLITE = "fleet+sqlite"
READY_TIMEOUT_S = 120.0
KEY = "sk-fleet-cost"
KEY_ENV = "FLEET_COST_KEY"
# Limits the run never reaches: what counting costs, not what refusing does.
KEY_LIMITS = "requests_per_minute = 10000000\ntokens_per_minute = 1000000000\n"
RATE_LIMITS = "requests_per_minute = 10000000\n"
CONC_LIMITS = "max_concurrent = 1000\n"
SPEND_LIMITS = "budget_usd = 1000000.0\n"
# Every replica prices the model (only a key with a budget reads it).
PRICES = '[prices."*"]\ninput_usd_per_1m_tokens = 1.0\noutput_usd_per_1m_tokens = 4.0\n'


@dataclass(frozen=True, slots=True)
class CostPlan:
    num_rounds: int
    num_requests: int  # per target, per kind, per round
    num_pairs: int  # paired requests per kind (bench/support/fleet_paired.py)


FULL_COST = CostPlan(num_rounds=20, num_requests=100, num_pairs=1000)
QUICK_COST = CostPlan(num_rounds=4, num_requests=50, num_pairs=200)


def replica_config(
    sim_url: str,
    redis_url: str | None,
    *,
    key_limits: str | None = None,
    is_resuming: bool = False,
    key_prefix: str = "hasten:",
    cache_redis_url: str | None = None,
    cache_sqlite_path: str | None = None,
) -> str:
    text = ""
    if key_limits is not None:
        text += f'[[server.api_keys]]\ntenant = "cost"\napi_key_env = "{KEY_ENV}"\n{key_limits}'
    text += f'[upstreams.sim]\nurl = "{sim_url}"\n[models."*"]\nupstream = "sim"\n'
    if is_resuming:
        text += "resume_streams = true\n"
    if cache_sqlite_path is not None:
        text += f'[cache]\nbackend = "sqlite"\nsqlite_path = "{cache_sqlite_path}"\n' + PRICES
    elif cache_redis_url is None:
        text += '[cache]\nbackend = "memory"\n' + PRICES
    else:
        text += f'[cache]\nbackend = "redis"\nredis_url = "{cache_redis_url}"\n' + PRICES
    return text if redis_url is None else text + fleet_table(redis_url, {"key_prefix": key_prefix})


@contextmanager
def cost_targets(workdir: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Base URLs (with /v1) of the simulator and the replicas that started, and why any
    did not (a replica refusing config it does not know yet)."""
    with ExitStack() as stack:
        redis_url = stack.enter_context(redis_server())
        sim = stack.enter_context(SimulatorProcess())
        plans: dict[str, tuple[str | None, str | None, bool]] = {
            SINGLE: (None, None, False),
            FLEET: (redis_url, None, False),
            LIMITED: (redis_url, KEY_LIMITS, False),
            RATE: (redis_url, RATE_LIMITS, False),
            CONC: (redis_url, CONC_LIMITS, False),
            SPEND: (redis_url, SPEND_LIMITS, False),
            RESUME: (redis_url, None, True),
            SINGLE_LIMITED: (None, KEY_LIMITS, False),
            SINGLE_RATE: (None, RATE_LIMITS, False),
            SINGLE_CONC: (None, CONC_LIMITS, False),
            SINGLE_SPEND: (None, SPEND_LIMITS, False),
            SINGLE_L2: (None, None, False),
            FLEET_L2: (redis_url, None, False),
            SINGLE_SQLITE: (None, None, False),
            FLEET_SQLITE: (redis_url, None, False),
        }
        replicas: dict[str, GatewayProcess] = {}
        for index, (name, (url, limits, is_resuming)) in enumerate(plans.items()):
            # A database each for the shared-L2 pair: one must not hit the other's answers.
            is_l2 = name in (SINGLE_L2, FLEET_L2)
            cache_url = f"{redis_url.rsplit('/', 1)[0]}/{index}" if is_l2 else None
            is_sqlite = name in (SINGLE_SQLITE, FLEET_SQLITE)
            sqlite_path = str(workdir / f"{name}.db") if is_sqlite else None
            path = workdir / f"{name}.toml"
            path.write_text(
                # A prefix each: replicas asked the same prompt back to back must not
                # coalesce with one another (one would follow another's finished flight).
                replica_config(
                    sim.url,
                    url,
                    key_limits=limits,
                    is_resuming=is_resuming,
                    key_prefix=f"hasten:{name}:",
                    cache_redis_url=cache_url,
                    cache_sqlite_path=sqlite_path,
                )
            )
            args = ("--host", "127.0.0.1", "--config", str(path), "--log-level", "warning")
            replicas[name] = GatewayProcess(*args, env={KEY_ENV: KEY})
            stack.callback(replicas[name].stop)
        targets, failures = {DIRECT: sim.url}, {}
        with ThreadPoolExecutor(max_workers=len(replicas)) as pool:
            started = {name: pool.submit(r.start, READY_TIMEOUT_S) for name, r in replicas.items()}
            for name, future in started.items():
                try:
                    targets[name] = f"{future.result().url}/v1"
                except ProcessDied as exc:
                    failures[name] = str(exc).strip().splitlines()[-1]
        yield targets, failures


def _settings(base_url: str, workload: WorkloadSpec, num_requests: int) -> LoadSettings:
    return LoadSettings(
        base_url=base_url,
        model=MODEL,
        api_key=KEY,  # every target gets it; only fleet+limits checks it
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
    with (
        tempfile.TemporaryDirectory(prefix="hasten-fleet-cost-") as workdir,
        cost_targets(Path(workdir)) as (targets, failures),
    ):
        samples = run_coroutine(_measure(targets, plan))
        paired = _measure_paired(targets, plan)
    latency = {
        name: {kind: percentiles(values) for kind, values in kinds.items() if values}
        for name, kinds in samples.items()
    }
    return {
        "plan": dataclasses.asdict(plan),
        "latency_ms": latency,
        "added_to_miss_ms": {
            name: _delta(latency[name]["miss"], latency[DIRECT]["miss"])
            for name in latency
            if name != DIRECT
        },
        "fleet_minus_single_ms": {
            kind: _delta(latency[FLEET][kind], latency[SINGLE][kind]) for kind in ("miss", "hit")
        },
        "limits_minus_fleet_ms": {
            kind: _delta(latency[LIMITED][kind], latency[FLEET][kind]) for kind in ("miss", "hit")
        }
        if LIMITED in latency
        else None,
        "not_started": failures,
        "paired": paired,
    }


# Each group is measured on its own, its targets taking turns request by request: the two
# sides of a pair are then asked within milliseconds of each other, by a machine in the same
# state, rather than among a dozen other targets.
PAIR_GROUPS: tuple[tuple[tuple[str, str], ...], ...] = (
    ((SINGLE, DIRECT), (FLEET, SINGLE)),
    ((FLEET_L2, SINGLE_L2),),
    ((FLEET_SQLITE, SINGLE_SQLITE),),
    tuple((name, FLEET) for name in (LIMITED, RATE, CONC, SPEND, RESUME)),
    (
        (LIMITED, SINGLE_LIMITED),
        (RATE, SINGLE_RATE),
        (CONC, SINGLE_CONC),
        (SPEND, SINGLE_SPEND),
    ),
)


def _measure_paired(targets: dict[str, str], plan: CostPlan) -> dict[str, Any]:
    """Median per-pair differences, for a miss (every target) and an L1 hit (replicas)."""
    auth = {"authorization": f"Bearer {KEY}"}
    figures: dict[str, Any] = {"miss": {}, "hit": {}}
    for number, group in enumerate(PAIR_GROUPS):
        names = dict.fromkeys(name for pair in group for name in pair if name in targets)
        members = {name: targets[name] for name in names}
        for kind in ("miss", "hit"):
            if kind == "hit":
                members.pop(DIRECT, None)  # the simulator has no cache
            paired = run_coroutine(
                measure_paired(
                    members, kind=kind, num_pairs=plan.num_pairs, headers=auth, tag=str(number)
                )
            )
            figures[kind].update(paired_figures(paired, group))
    return figures

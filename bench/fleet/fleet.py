"""Fleet: 3 gateway replicas behind nginx, one Redis: issue 13's acceptance scenarios as
measurements, and what ``[fleet]`` costs a replica's hot path.

The scenarios are the ones tests/fleet/test_replicas.py holds to their rules
(tests/support/fleet_checks.py): real ``hasten serve`` processes, Debian's nginx round
robin on loopback (scripts/ensure-nginx.sh), a real redis-server, simulators. A scenario
that cannot run (replicas refusing their config, say) is reported, not fatal. Then
bench/support/fleet_cost.py: a miss and an L1 hit, one replica without ``[fleet]`` and one with it.
Prints a table, one summary line and the JSON.

    .venv/bin/python bench/fleet/fleet.py [--quick] [--json] [--no-cost] [--no-scenarios]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx
import orjson

from bench.support.fleet_cost import (
    CONC,
    FLEET,
    FLEET_L2,
    FLEET_SQLITE,
    FULL_COST,
    LIMITED,
    QUICK_COST,
    RATE,
    RESUME,
    SINGLE,
    SINGLE_CONC,
    SINGLE_L2,
    SINGLE_LIMITED,
    SINGLE_RATE,
    SINGLE_SPEND,
    SINGLE_SQLITE,
    SPEND,
    measure_cost,
)
from bench.support.server_process import invocation
from tests.support import fleet_checks as checks
from tests.support import fleet_configs as configs
from tests.support.fleet import Fleet

REPO = Path(__file__).resolve().parents[2]
# What a scenario that cannot run raises (ProcessDied is an AssertionError): reported, not fatal.
SCENARIO_FAILURES = (AssertionError, RuntimeError, OSError, httpx.HTTPError)
GOAL_MISS_MS = 0.3  # the bound on what [fleet] may add to a miss (p50)


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    name: str
    rule: str
    measured: str = ""
    is_pass: bool | None = None  # None: the scenario could not run
    raw: dict[str, Any] = dataclasses.field(default_factory=dict)


def _raw(result: object) -> dict[str, Any]:
    raw: dict[str, Any] = orjson.loads(
        orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS)
    )
    return raw


def spread_row(fleet: Fleet, row: Row) -> Row:
    r = checks.spread_and_shared_hit(fleet)
    sequence = r.replica_sequence
    is_pass = sorted(sequence[:3]) == [0, 1, 2] and sequence[3:] == sequence[:3]
    is_pass = is_pass and (r.first_cache, r.again_cache) == ("miss", "hit") and r.num_calls == 1
    measured = f"replicas {sequence}; {r.first_cache} then {r.again_cache}; {r.num_calls} call"
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def coalesce_row(fleet: Fleet, row: Row) -> Row:
    r = checks.coalesce(fleet, num_clients=100)
    measured = f"{r.num_calls} upstream calls; {r.num_as_reference}/100 full identical answers"
    is_pass = r.num_calls == 1 and r.num_as_reference == r.num_clients
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def routing_row(fleet: Fleet, row: Row) -> Row:
    r = checks.degraded_routing(fleet)
    measured = f"{r.num_after_to_degraded}/{r.num_after} to b (replica 1 tried b "
    measured += f"{sum(r.first_tried_degraded)} of 10)"
    is_pass = r.num_after_to_degraded == 0
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def hedge_row(fleet: Fleet, row: Row) -> Row:
    r = checks.hedge_budget(fleet, num_requests=60)
    measured = f"{r.num_extra} extra of {r.num_requests} ({r.extra_ratio:.1%}), allowed "
    measured += f"{r.num_allowed:g}; {r.num_hedged} hedged"
    is_pass = r.statuses == {200: r.num_requests} and r.num_extra <= r.num_allowed
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def kill_row(fleet: Fleet, row: Row) -> Row:
    r = checks.kill_leader(fleet)
    measured = f"{r.num_calls} upstream calls; {r.num_live_as_reference}/"
    measured += f"{r.num_on_live_replicas} clients of live replicas answered in full"
    is_pass = not r.is_leader_complete and r.num_calls <= 2
    is_pass = is_pass and r.num_live_as_reference == r.num_on_live_replicas
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def limit_row(fleet: Fleet, row: Row) -> Row:
    r = checks.rate_limit(fleet, num_requests=300)
    is_pass = abs(r.num_admitted - configs.REQUESTS_PER_MINUTE) <= 1
    is_pass = is_pass and set(r.statuses) <= {200, 429} and not r.num_limited_without_retry_after
    measured = f"admitted {r.num_admitted} of {r.num_requests} {r.statuses}"
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


def redis_loss_row(fleet: Fleet, row: Row) -> Row:
    r = checks.redis_loss(fleet, num_requests=6)
    is_pass = r.statuses == [200] * 6 and r.replicas_used == [1, 2]
    measured = f"statuses {r.statuses}; replicas {r.replicas_used}"
    return dataclasses.replace(row, measured=measured, is_pass=is_pass, raw=_raw(r))


Measure = Callable[[Fleet, Row], Row]
Group = tuple[Callable[[Path], Fleet], tuple[tuple[Row, Measure], ...]]
# Scenarios in order, grouped by the fleet they run on (the kill leaves two replicas, which
# then lose Redis; the limited key needs its own config).
GROUPS: tuple[Group, ...] = (
    (
        configs.shared_fleet,
        (
            (Row("round robin + shared cache", "cycles 3 replicas; repeat hits Redis"), spread_row),
            (Row("100 identical streams", "1 upstream call, 100 full answers"), coalesce_row),
            (Row("degraded deployment", "replicas 2-3: 0 of 10 to it"), routing_row),
            (Row("hedge budget, fleet-wide", "extra <= 5% x requests + burst"), hedge_row),
        ),
    ),
    (
        configs.single_sim_fleet,
        (
            (Row("leader killed mid-stream", "live clients answered; <= 2 calls"), kill_row),
            (Row("then Redis lost", "6 of 6 answered by replicas 2-3"), redis_loss_row),
        ),
    ),
    (
        configs.limited_fleet,
        ((Row("100 requests/minute key", "admits 100 +- 1 of 300"), limit_row),),
    ),
)


def _could_not_run(row: Row, exc: Exception) -> Row:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [repr(exc)]
    # A replica's stderr ends with the config error; the first line says who died.
    reason = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return dataclasses.replace(row, measured=f"could not run: {reason[:300]}", is_pass=None)


def run_scenarios(workdir: Path) -> list[Row]:
    rows: list[Row] = []
    for index, (make, scenarios) in enumerate(GROUPS):
        num_before = len(rows)
        try:
            with make(workdir / f"fleet-{index}") as fleet:
                for row, measure in scenarios:
                    try:
                        rows.append(measure(fleet, row))
                    except SCENARIO_FAILURES as exc:
                        rows.append(_could_not_run(row, exc))
        except SCENARIO_FAILURES as exc:  # the fleet did not start
            rows += [_could_not_run(row, exc) for row, _ in scenarios[len(rows) - num_before :]]
    return rows


def table(rows: list[Row]) -> str:
    verdict = {True: "pass", False: "FAIL", None: "n/a"}
    lines = [f"{'scenario':<28} {'rule':<38} {'result':<5} measured"]
    lines += [f"{r.name:<28} {r.rule:<38} {verdict[r.is_pass]:<5} {r.measured}" for r in rows]
    return "\n".join(lines)


def cost_table(cost: dict[str, Any]) -> str:
    lines = [f"{'target':<8} {'miss p50':>9} {'miss p99':>9} {'hit p50':>9} {'hit p99':>9}  ms"]
    for name, kinds in cost["latency_ms"].items():
        miss, hit = kinds.get("miss", {}), kinds.get("hit", {})
        cells = [miss.get("p50"), miss.get("p99"), hit.get("p50"), hit.get("p99")]
        lines.append(f"{name:<8} " + " ".join(f"{'-' if c is None else c:>9}" for c in cells))
    for label, key in (
        ("[fleet] adds", "fleet_minus_single_ms"),
        ("limits add", "limits_minus_fleet_ms"),
    ):
        delta = cost[key]
        if delta is not None:
            lines.append(
                f"{label}: miss p50 {delta['miss']['p50']} p99 {delta['miss']['p99']}, "
                f"hit p50 {delta['hit']['p50']} p99 {delta['hit']['p99']}"
            )
    for kind, figures in cost["paired"].items():
        for label, delta in figures.items():
            lines.append(
                f"paired {kind}, median of {label}: client {delta['client_ms']} ms, "
                f"gateway's own time {delta['gateway_ms']} ms"
            )
    lines += [f"{name} not started: {why}" for name, why in cost["not_started"].items()]
    return "\n".join(lines)


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    rows = result.get("scenarios", [])
    if rows:
        num_pass = sum(r["is_pass"] is True for r in rows)
        num_na = sum(r["is_pass"] is None for r in rows)
        parts.append(f"scenarios {num_pass}/{len(rows)} pass ({num_na} could not run)")
    cost = result.get("cost")
    if cost:
        # The paired medians: the steadiest estimate this machine gives
        # (bench/support/fleet_paired.py).
        label = f"{FLEET} - {SINGLE}"
        miss = cost["paired"]["miss"][label]["client_ms"]
        hit = cost["paired"]["hit"][label]["client_ms"]
        goal = "met" if miss is not None and miss <= GOAL_MISS_MS else "missed"
        parts.append(
            f"[fleet] adds {miss:+.3f} ms to a miss with an L1-only cache (paired median;"
            f" goal <= {GOAL_MISS_MS}: {goal}), {hit:+.3f} ms to an L1 hit"
        )
        for target, baseline, tiers in (
            (FLEET_L2, SINGLE_L2, "the exact cache shared through Redis"),
            (FLEET_SQLITE, SINGLE_SQLITE, "the default cache tiers (L1, SQLite)"),
        ):
            shared = cost["paired"]["miss"].get(f"{target} - {baseline}")
            shared_hit = cost["paired"]["hit"].get(f"{target} - {baseline}")
            if shared is not None and shared_hit is not None:
                added = shared["client_ms"]
                met = "met" if added is not None and added <= GOAL_MISS_MS else "missed"
                parts.append(
                    f"with {tiers} {added:+.3f} ms to a miss ({met}),"
                    f" {shared_hit['client_ms']:+.3f} ms to an L1 hit"
                )
        for name, what in (
            (LIMITED, "request and token rates"),
            (RATE, "a request rate"),
            (CONC, "a concurrency limit"),
            (SPEND, "a budget"),
            (RESUME, "resume"),
        ):
            miss_pair = cost["paired"]["miss"].get(f"{name} - {FLEET}")
            hit_pair = cost["paired"]["hit"].get(f"{name} - {FLEET}")
            if miss_pair is not None and hit_pair is not None:
                parts.append(
                    f"{what} add {miss_pair['client_ms']:+.3f} ms to a miss,"
                    f" {hit_pair['client_ms']:+.3f} ms to a hit"
                )
        parts += _shared_limit_parts(cost["paired"])
    return "fleet: " + "; ".join(parts)


def _shared_limit_parts(paired: dict[str, Any]) -> list[str]:
    """What counting a key's limits in Redis adds, against the same key on a replica
    without [fleet] (the single-replica figure; the goal: at most 0.3 ms added to a miss,
    nothing to an L1 hit)."""
    parts = []
    for fleet_name, single_name, what in (
        (LIMITED, SINGLE_LIMITED, "request and token rates"),
        (RATE, SINGLE_RATE, "a request rate"),
        (CONC, SINGLE_CONC, "a concurrency limit"),
        (SPEND, SINGLE_SPEND, "a budget"),
    ):
        miss_pair = paired["miss"].get(f"{fleet_name} - {single_name}")
        hit_pair = paired["hit"].get(f"{fleet_name} - {single_name}")
        if miss_pair is not None and hit_pair is not None:
            parts.append(
                f"{what} counted in Redis vs on one replica: {miss_pair['client_ms']:+.3f} ms"
                f" to a miss, {hit_pair['client_ms']:+.3f} ms to a hit"
            )
    return parts


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "command": command,
        "commit": commit,
        "quick": args.quick,
        "machine": {"cores": os.cpu_count(), "load_average_1m_at_start": os.getloadavg()[0]},
    }
    workdir = Path(tempfile.mkdtemp(prefix="hasten-fleet-bench-"))
    try:
        if not args.no_scenarios:
            rows = run_scenarios(workdir)
            result["scenarios"] = [dataclasses.asdict(r) for r in rows]
            if not args.json:
                print(table(rows))
        if not args.no_cost:
            load_at_cost_start = os.getloadavg()[0]
            result["cost"] = measure_cost(QUICK_COST if args.quick else FULL_COST)
            result["cost"]["load_average_1m_at_start"] = load_at_cost_start
            result["cost"]["targets"] = {
                SINGLE: "one replica without [fleet]",
                FLEET: "one replica with [fleet] redis_url (Redis on loopback)",
                "direct": "the zero-latency simulator itself",
                LIMITED: "[fleet] and a key limited in requests and tokens per minute (never"
                " reached)",
                RATE: "[fleet] and a key limited in requests per minute only (never reached)",
                CONC: "[fleet] and a key limited to 1000 concurrent requests (never reached)",
                SPEND: "[fleet] and a key with a spend budget (never reached)",
                RESUME: "[fleet] and resume_streams = true on the model",
                SINGLE_LIMITED: "the fleet+limits key on a replica without [fleet]",
                SINGLE_RATE: "the fleet+rate key on a replica without [fleet]",
                SINGLE_CONC: "the fleet+conc key on a replica without [fleet]",
                SINGLE_SPEND: "the fleet+spend key on a replica without [fleet]",
            }
            if not args.json:
                print(cost_table(result["cost"]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cost rounds and requests")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--no-cost", action="store_true", help="skip the [fleet] cost run")
    parser.add_argument("--no-scenarios", action="store_true", help="only the cost run")
    args = parser.parse_args(argv)
    result = run(args, invocation(argv))
    if not args.json:
        print(summary_line(result))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What ``[fleet]`` adds to a miss, at this checkout and at another commit, side by side.

Three replicas in front of one zero-latency simulator: one without ``[fleet]``, one with
``[fleet]`` running ``--rev`` (its ``src/`` from a temporary git worktree, on PYTHONPATH),
one with ``[fleet]`` running this checkout, both on one real redis-server. Each fresh
prompt goes to all three in turns (bench/support/fleet_paired.py); the figures are median per-pair
differences, so a change to the fleet's miss path is measured against the previous code in
the same run rather than across runs. Prints one summary line and JSON.

    .venv/bin/python bench/fleet/miss_replay.py --rev 4f64ed3 --pairs 600 --runs 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import orjson

from bench.support.fleet_cost import replica_config
from bench.support.fleet_paired import measure_paired, paired_figures
from bench.support.server_process import invocation, rev_source
from hasten.loadgen.cli import run_coroutine
from tests.support.fleet import fleet_table
from tests.support.servers import GatewayProcess, SimulatorProcess, redis_server

READY_TIMEOUT_S = 120.0
SINGLE, REV, THIS = "single", "fleet:rev", "fleet:this"
PAIRS = ((THIS, SINGLE), (REV, SINGLE), (THIS, REV))


def measure(rev: str, num_pairs: int, num_runs: int) -> dict[str, Any]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hasten-miss-")))
        rev_src = stack.enter_context(rev_source(rev, workdir))
        redis_url = stack.enter_context(redis_server())
        sim = stack.enter_context(SimulatorProcess())
        sides = {
            SINGLE: ("", {}),
            REV: (redis_url, {"PYTHONPATH": str(rev_src)}),
            THIS: (redis_url, {}),
        }
        targets: dict[str, str] = {}
        for index, (name, (url, env)) in enumerate(sides.items()):
            text = replica_config(sim.url, None)
            if url:  # a prefix each: the two fleet replicas must not follow one another
                text += fleet_table(url, {"key_prefix": f"miss{index}:"})
            path = workdir / f"replica-{index}.toml"
            path.write_text(text)
            args = ("--host", "127.0.0.1", "--config", str(path), "--log-level", "warning")
            gateway = GatewayProcess(*args, env=env)
            stack.callback(gateway.stop)
            targets[name] = f"{gateway.start(READY_TIMEOUT_S).url}/v1"
        runs = []
        for number in range(num_runs):
            asked = measure_paired(
                targets, kind="miss", num_pairs=num_pairs, headers={}, tag=f"replay {number}"
            )
            runs.append(paired_figures(run_coroutine(asked), PAIRS))
    return {"rev": rev, "num_pairs": num_pairs, "runs": runs}


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    for target, baseline in PAIRS:
        label = f"{target} - {baseline}"
        deltas = [f"{run[label]['client_ms']:+.3f}" for run in result["runs"]]
        parts.append(f"{label} {' / '.join(deltas)} ms")
    return f"miss_replay vs {result['rev']}: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=600)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    result = measure(args.rev, args.pairs, args.runs)
    result["command"] = invocation(argv)
    print(summary_line(result))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

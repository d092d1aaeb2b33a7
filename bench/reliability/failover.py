"""Failover conformance: every scenario of the catalogue, scored pass / partial / safe-fail /
fail, as a scorecard (markdown table), its JSON and one summary line.

The catalogue, the lab and the scoring rules live in ``tests/support/failover/`` (the quick
test ``tests/test_failover.py`` runs the same scenarios once each); this runs each with
``--repeat`` requests each (the degrading one asks 8 + 16 x (repeat - 1) after it degrades).

    PYTHONPATH=src nice -n 19 .venv/bin/python bench/reliability/failover.py [--repeat 3]
        [--only NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.failover.scenarios import CATALOGUE, Run, Scenario
from tests.support.failover.verdict import Outcome, Verdict


async def run_one(client: httpx.AsyncClient, scenario: Scenario, num_repeats: int) -> Verdict:
    run = Run(client, uuid.uuid4().hex[:8], num_repeats)
    try:
        return await scenario.run(run)
    except Exception as exc:  # a scenario that cannot even run is scored, not hidden
        return Verdict(Outcome.FAIL, f"the scenario raised {type(exc).__name__}: {exc}"[:200])


async def run_all(names: list[str], num_repeats: int) -> list[dict[str, Any]]:
    selected = [s for s in CATALOGUE if not names or s.name in names]
    rows = []
    async with httpx.AsyncClient() as client:
        for scenario in selected:
            started_s = time.perf_counter()
            verdict = await run_one(client, scenario, num_repeats)
            rows.append(
                {
                    "scenario": scenario.name,
                    "pass_rule": scenario.pass_rule,
                    "awaits": scenario.awaits,
                    **verdict.to_dict(),
                    "scenario_s": round(time.perf_counter() - started_s, 2),
                }
            )
            print(f"{scenario.name}: {verdict.outcome} ({verdict.note})", file=sys.stderr)
    return rows


def scorecard(rows: list[dict[str, Any]]) -> str:
    lines = ["| scenario | outcome | time to answer | note |", "|---|---|---|---|"]
    for row in rows:
        note = str(row["note"]).replace("|", "/")
        if row["awaits"] and row["outcome"] != "pass":
            note = f"{note} (pass awaits {row['awaits']})" if note else f"awaits {row['awaits']}"
        lines.append(
            f"| {row['scenario']} | {row['outcome']} | {row['elapsed_s']:.2f} s | {note} |"
        )
    return "\n".join(lines)


def summary_line(rows: list[dict[str, Any]]) -> str:
    counts = {o: sum(row["outcome"] == str(o) for row in rows) for o in Outcome}
    return "failover: " + ", ".join(f"{n} {o}" for o, n in counts.items() if n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="requests per scenario")
    parser.add_argument("--only", nargs="*", default=[], help="scenario names to run")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    known = {s.name for s in CATALOGUE}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]} (known: {', '.join(sorted(known))})")
    rows = asyncio.run(run_all(args.only, max(1, args.repeat)))
    result = {"repeat": args.repeat, "scenarios": rows, "summary": summary_line(rows)}
    print(scorecard(rows))
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(summary_line(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Exact-cache hits of stored streams, this checkout against another commit, side by side.

Answers are stored as streams; a non-stream client's hit is served a JSON body. This asks
the same hit of a gateway running this checkout and one running ``--rev`` (its ``src/``
from a temporary git worktree, on PYTHONPATH), request by request in turns
(bench/support/fleet_paired.py), for answers of each ``--tokens`` length from a zero-latency
simulator (``--stream``: asked as streams, each read to its end), and reports the median
per-pair difference. Both gateways start through
``hasten.cli.main``, so commits without ``hasten/__main__.py`` (4044c49, the code issue 15
was filed on) run too. Prints one summary line and JSON.

    .venv/bin/python bench/overhead/hit_replay.py --rev 912b3e5 --tokens 20 200 --pairs 400
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

from bench.support.fleet_paired import measure_paired, paired_figures
from bench.support.server_process import invocation, rev_source
from hasten.loadgen.cli import run_coroutine
from tests.support.servers import GatewayProcess, SimulatorProcess

READY_TIMEOUT_S = 120.0
_RUN_CLI = "import sys; from hasten.cli import main; sys.exit(main(sys.argv[1:]))"


def _config(sim_url: str) -> str:
    return (
        f'[upstreams.sim]\nurl = "{sim_url}"\n[models."*"]\nupstream = "sim"\n'
        '[cache]\nbackend = "memory"\n'
    )


def measure(
    rev: str, token_counts: list[int], num_pairs: int, num_runs: int, is_stream: bool = False
) -> dict[str, Any]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hasten-hits-")))
        rev_src = stack.enter_context(rev_source(rev, workdir))
        targets: dict[str, str] = {}
        for num_tokens in token_counts:
            flags = ("--output-tokens", str(num_tokens), "--ttft-ms", "0", "--decode-ms", "0")
            sim = stack.enter_context(SimulatorProcess(*flags))
            path = workdir / f"gateway-{num_tokens}.toml"
            path.write_text(_config(sim.url))
            for side, env in (("rev", {"PYTHONPATH": str(rev_src)}), ("this", {})):
                args = ("--host", "127.0.0.1", "--config", str(path), "--log-level", "warning")
                gateway = GatewayProcess(*args, env=env)
                # Through the CLI's main, not ``-m hasten``: older commits have no __main__.
                gateway.command = [sys.executable, "-c", _RUN_CLI, *gateway.command[3:]]
                stack.callback(gateway.stop)
                targets[f"{side}:{num_tokens}"] = f"{gateway.start(READY_TIMEOUT_S).url}/v1"
        pairs = [(f"this:{n}", f"rev:{n}") for n in token_counts]
        runs = []
        for number in range(num_runs):
            asked = measure_paired(
                targets,
                kind="hit",
                num_pairs=num_pairs,
                headers={},
                tag=str(number),
                is_stream=is_stream,
            )
            paired = run_coroutine(asked)
            medians = {
                name: round(sorted(values)[len(values) // 2], 3)
                for name, values in paired.client_ms.items()
            }
            runs.append({"paired": paired_figures(paired, pairs), "median_client_ms": medians})
    return {
        "rev": rev,
        "tokens": token_counts,
        "num_pairs": num_pairs,
        "is_stream": is_stream,
        "runs": runs,
    }


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    for num_tokens in result["tokens"]:
        label = f"this:{num_tokens} - rev:{num_tokens}"
        deltas = [f"{run['paired'][label]['client_ms']:+.3f}" for run in result["runs"]]
        parts.append(f"{num_tokens} tokens {' / '.join(deltas)} ms")
    kind = "stream" if result.get("is_stream") else "non-stream"
    return f"hit_replay vs {result['rev']}: a {kind} exact hit, " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the commit to compare against")
    parser.add_argument("--tokens", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--stream", action="store_true", help="a stream client's hit")
    args = parser.parse_args(argv)
    result = measure(args.rev, args.tokens, args.pairs, args.runs, args.stream)
    result["command"] = invocation(argv)
    print(summary_line(result))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The default semantic tier on the request path, this checkout against another commit.

    .venv/bin/python bench/semantic/default.py --rev REV [--pairs gptcache_mock_pairs]
                                               [--limit 150] [--ttft-ms 0]

Two gateways with ``[semantic] enabled = true`` and nothing else (the calibrated default:
``target_precision = 0.95``, the e5 embedder, no judge), one running this checkout and one
``--rev`` (its ``src/`` from a temporary git worktree, on PYTHONPATH), in front of one
simulator (time to first token ``--ttft-ms``). For each positive pair of ``--pairs`` (a
seeded sample of ``--limit``), three requests go to both gateways in turns (which one goes
first alternates), each timed by the client over its own keep-alive connection:
- ``miss``: the pair's ``a``, never asked before: an exact and a semantic miss, answered by
  the upstream and stored;
- ``paraphrase``: its ``b``: at the default no paraphrase is safe enough to serve (no
  evidence of e5 reaches 0.95 precision), so a miss too, stored;
- ``repeat_soon``: ``a`` again with a trailing newline: not an exact hit (the body
  differs), the same question by the default's rule: what the default serves by meaning. Its text is
  still among the embedder's remembered ones (the last 1,024), so neither side embeds it;
- ``repeat_later``: the same, after both gateways restarted on their files: a question
  asked long ago, whose embedding nobody remembers.
After each miss the bench waits until both gateways have indexed the answer, so every
request is timed on its own path (the insert embeds the question after the answer, on both
sides; only where the lookup does it differs). Reports p50 / p99 per kind and side and the
median per-pair difference this - rev, and each side's embeddings and lookup reasons.
Prints one summary line, then JSON. Data: ../shared/data/semcache (read at run time).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.semantic

import httpx
import numpy as np

from bench.semantic.hit_http import percentiles
from bench.support.server_process import clean_environment, invocation, rev_source
from hasten.semantic.freshness import FreshnessPolicy, ttl_s
from tests.support.servers import GatewayProcess, SimulatorProcess

DATA_DIR = Path("/work/shared/data/semcache")
READY_TIMEOUT_S = 120.0
ADMIN_KEY = "bench-admin-key"
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN_KEY}"}
MAX_INDEX_WAIT_POLLS = 1000
INDEX_POLL_S = 0.005
SIDES = ("this", "rev")
KINDS = ("miss", "paraphrase", "repeat_soon", "repeat_later")


def _config(sim_url: str, workdir: Path, side: str) -> str:
    """The exact answers in SQLite too: a restart keeps every tier."""
    return (
        f'[upstreams.sim]\nurl = "{sim_url}"\n[models."*"]\nupstream = "sim"\n'
        f'[cache]\nbackend = "sqlite"\nsqlite_path = "{workdir / side}-exact.sqlite3"\n'
        f'[semantic]\nenabled = true\npath = "{workdir / side}-semantic.sqlite3"\n'
    )


def _ask(client: httpx.Client, text: str) -> tuple[str, float]:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": text}]}
    body["temperature"] = 0
    started = time.perf_counter()
    reply = client.post("/v1/chat/completions", json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000
    reply.raise_for_status()
    return reply.headers["x-hasten-cache"], elapsed_ms


def _semantic_stats(client: httpx.Client) -> dict[str, Any]:
    stats: dict[str, Any] = client.get("/admin/cache/stats", headers=ADMIN_HEADERS).json()
    return stats["semantic"]


def _wait_indexed(clients: dict[str, httpx.Client], num_entries: int) -> None:
    for client in clients.values():
        for _ in range(MAX_INDEX_WAIT_POLLS):
            if _semantic_stats(client)["entries"] >= num_entries:
                break
            time.sleep(INDEX_POLL_S)
        else:
            raise RuntimeError(f"a gateway never indexed {num_entries} entries")


def _repeat(text: str) -> str:
    """The same question by the default's rule (its ends trimmed), another body."""
    return text + "\n"


def _rows(pairs: str, limit: int, seed: int) -> list[dict[str, Any]]:
    path = DATA_DIR / f"{pairs}.jsonl"
    rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = [row for row in rows if row["label"] == 1 and row["a"].strip() != row["b"].strip()]
    # Questions about "now" are never stored by meaning: they would never be indexed.
    freshness = FreshnessPolicy()
    rows = [row for row in rows if min(ttl_s(row[side], policy=freshness) for side in "ab") > 0]
    seen: set[str] = set()
    unique = []
    for row in rows:  # each question asked once as a miss
        if row["a"] not in seen and row["b"] not in seen:
            seen.update((row["a"], row["b"]))
            unique.append(row)
    if limit < len(unique):
        chosen = np.random.default_rng(seed).choice(len(unique), limit, replace=False)
        unique = [unique[i] for i in sorted(chosen)]
    return unique


class _Sides:
    """The two gateways and a client each; restartable on the same files."""

    def __init__(self, stack: ExitStack, workdir: Path, sim_url: str, rev_src: Path) -> None:
        self._stack = stack
        env = {**clean_environment(), "HASTEN_ADMIN_API_KEY": ADMIN_KEY}
        self._envs = {"this": env, "rev": {**env, "PYTHONPATH": str(rev_src)}}
        self._configs = {}
        for side in SIDES:
            config = workdir / f"{side}.toml"
            config.write_text(_config(sim_url, workdir, side))
            self._configs[side] = config
        self._gateways: dict[str, GatewayProcess] = {}
        self.clients: dict[str, httpx.Client] = {}

    def start(self) -> None:
        for side in SIDES:
            args = ("--host", "127.0.0.1", "--config", str(self._configs[side]))
            gateway = GatewayProcess(*args, "--log-level", "warning", env=self._envs[side])
            self._stack.callback(gateway.stop)
            self._gateways[side] = gateway
            url = gateway.start(READY_TIMEOUT_S).url
            self.clients[side] = httpx.Client(base_url=url, timeout=60.0)
            _ask(self.clients[side], "warm-up: load the embedder")

    def stop(self) -> None:
        for side in SIDES:
            self.clients.pop(side).close()
            self._gateways.pop(side).stop()


def measure(rev: str, pairs: str, limit: int, ttft_ms: float, seed: int) -> dict[str, Any]:
    rows = _rows(pairs, limit, seed)
    latencies: dict[str, dict[str, list[float]]] = {s: {k: [] for k in KINDS} for s in SIDES}
    outcomes: dict[str, dict[str, dict[str, int]]] = {s: {k: {} for k in KINDS} for s in SIDES}

    def ask(side: str, kind: str, text: str) -> None:
        outcome, elapsed_ms = _ask(sides.clients[side], text)
        latencies[side][kind].append(elapsed_ms)
        outcomes[side][kind][outcome] = outcomes[side][kind].get(outcome, 0) + 1

    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hasten-semdef-")))
        rev_src = stack.enter_context(rev_source(rev, workdir))
        flags = ("--ttft-ms", str(ttft_ms), "--decode-ms", "0", "--output-tokens", "32")
        sim = stack.enter_context(SimulatorProcess(*flags))
        sides = _Sides(stack, workdir, sim.url, rev_src)
        sides.start()
        num_entries = 1
        _wait_indexed(sides.clients, num_entries)
        for number, row in enumerate(rows):
            order = SIDES if number % 2 == 0 else SIDES[::-1]
            for kind, text in (("miss", row["a"]), ("paraphrase", row["b"])):
                for side in order:
                    ask(side, kind, text)
                num_entries += 1
                _wait_indexed(sides.clients, num_entries)
            for side in order:
                ask(side, "repeat_soon", _repeat(row["a"]))
        # Hours later, as it were: restarted gateways remember no embedding of the questions.
        sides.stop()
        sides.start()
        for number, row in enumerate(rows):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                ask(side, "repeat_later", _repeat(row["a"]))
        stats = {side: _semantic_stats(client) for side, client in sides.clients.items()}
        sides.stop()
    return {
        "rev": rev,
        "pairs": pairs,
        "num_pairs": len(rows),
        "mean_chars": round(float(np.mean([len(row["a"]) for row in rows])), 1),
        "ttft_ms": ttft_ms,
        "latency_ms": {
            side: {kind: percentiles(latencies[side][kind]) for kind in KINDS} for side in SIDES
        },
        "this_minus_rev_median_ms": {
            kind: round(
                float(np.median(np.subtract(latencies["this"][kind], latencies["rev"][kind]))), 2
            )
            for kind in KINDS
        },
        "outcomes": outcomes,
        "semantic_stats_after_restart": {
            side: {
                "embedded_texts": stats[side]["embedded_texts"],
                "by_script": stats[side]["by_script"],
            }
            for side in SIDES
        },
    }


def summary_line(result: dict[str, Any]) -> str:
    lat, delta = result["latency_ms"], result["this_minus_rev_median_ms"]
    parts = [
        f"{kind} p50 {lat['this'][kind].get('p50')} vs {lat['rev'][kind].get('p50')} ms "
        f"(paired {delta[kind]:+.2f})"
        for kind in KINDS
    ]
    return (
        f"semantic default, this vs {result['rev']}, {result['pairs']} "
        f"({result['num_pairs']} pairs, {result['mean_chars']} chars): " + "; ".join(parts)
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the commit to compare against")
    parser.add_argument("--pairs", default="gptcache_mock_pairs", help="a file of the data set")
    parser.add_argument("--limit", type=int, default=150, help="seeded sample of N pairs")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="simulated upstream TTFT")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(args.rev, args.pairs, args.limit, args.ttft_ms, args.seed)
    result["command"] = invocation(argv)
    print(summary_line(result))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

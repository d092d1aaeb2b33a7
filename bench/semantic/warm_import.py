"""An import over HTTP (``POST /admin/cache/import``), at the default and at a lower target.

python bench/semantic/warm_import.py [--pairs qqp_dev] [--num 2000]

Two ``hasten serve`` gateways (SQLite tiers, e5) in front of ``hasten simulate``, one with
``[semantic] enabled = true`` only (target 0.95: only repeats are served, so an import's
rows are stored without waiting for the model and their vectors follow in the background),
one with ``target_precision = 0.8`` (paraphrases are served: every row is embedded before
the import answers). Both import the same ``--num`` distinct ``a`` questions of ``--pairs``;
reported per gateway: entries/s until the import answered (its rows servable), entries/s
until every vector was in (``vectors_pending`` 0), and a repeat of each of 200 imported
questions asked at once after the import (outcome counts: the rows served before their
vectors). Prints one summary line, then JSON. Data: ../shared/data/semcache (read at run time).
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

from bench.semantic.default import (
    ADMIN_HEADERS,
    ADMIN_KEY,
    DATA_DIR,
    READY_TIMEOUT_S,
    _ask,
    _repeat,
)
from bench.support.server_process import clean_environment, invocation
from tests.support.servers import GatewayProcess, SimulatorProcess

NUM_REPEATS = 200
POLL_S = 0.05
MAX_FILL_WAIT_S = 900.0
TARGETS = {"default_0.95": None, "target_0.8": 0.8}


def _questions(pairs: str, num: int) -> list[str]:
    seen: dict[str, None] = {}
    for line in (DATA_DIR / f"{pairs}.jsonl").open(encoding="utf-8"):
        if line.strip():
            seen.setdefault(json.loads(line)["a"].strip(), None)
    return list(seen)[:num]


def _config(sim_url: str, workdir: Path, name: str, target: float | None) -> Path:
    text = (
        f'[upstreams.sim]\nurl = "{sim_url}"\n[models."*"]\nupstream = "sim"\n'
        f'[cache]\nbackend = "sqlite"\nsqlite_path = "{workdir / name}-exact.sqlite3"\n'
        f'[semantic]\nenabled = true\npath = "{workdir / name}-semantic.sqlite3"\n'
    )
    if target is not None:
        text += f"target_precision = {target}\n"
    path = workdir / f"{name}.toml"
    path.write_text(text)
    return path


def _import(client: httpx.Client, questions: list[str]) -> dict[str, Any]:
    lines = b"".join(
        json.dumps({"question": q, "answer": f"answer {i}", "model": "sim-model"}).encode() + b"\n"
        for i, q in enumerate(questions)
    )
    started = time.perf_counter()
    reply = client.post("/admin/cache/import", content=lines, headers=ADMIN_HEADERS)
    answered_s = time.perf_counter() - started
    reply.raise_for_status()
    outcomes: dict[str, int] = {}
    for question in questions[:NUM_REPEATS]:
        outcome, _ = _ask(client, _repeat(question))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    while time.perf_counter() - started < MAX_FILL_WAIT_S:
        stats = client.get("/admin/cache/stats", headers=ADMIN_HEADERS).json()["semantic"]
        if stats["vectors_pending"] == 0:
            break
        time.sleep(POLL_S)
    indexed_s = time.perf_counter() - started
    return {
        "answer": reply.json(),
        "answered_s": round(answered_s, 3),
        "servable_entries_per_s": round(len(questions) / answered_s, 1),
        "all_vectors_s": round(indexed_s, 3),
        "indexed_entries_per_s": round(len(questions) / indexed_s, 1),
        "repeats_asked_at_once": outcomes,
        "entries": stats["entries"],
        "vectors_pending_at_end": stats["vectors_pending"],
    }


def measure(pairs: str, num: int) -> dict[str, Any]:
    questions = _questions(pairs, num)
    result: dict[str, Any] = {"pairs": pairs, "num_questions": len(questions)}
    env = {**clean_environment(), "HASTEN_ADMIN_API_KEY": ADMIN_KEY}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        sim = SimulatorProcess("--host", "127.0.0.1")
        stack.callback(sim.stop)
        sim_url = sim.start(READY_TIMEOUT_S).url
        for name, target in TARGETS.items():  # one at a time: each import has both cores
            config = _config(sim_url, workdir, name, target)
            args = ("--host", "127.0.0.1", "--config", str(config), "--log-level", "warning")
            gateway = GatewayProcess(*args, env=env)
            try:
                url = gateway.start(READY_TIMEOUT_S).url
                with httpx.Client(base_url=url, timeout=MAX_FILL_WAIT_S) as client:
                    _ask(client, "warm-up: load the embedder")
                    result[name] = _import(client, questions)
            finally:
                gateway.stop()
    return result


def summary_line(result: dict[str, Any]) -> str:
    parts = [
        f"{name}: servable {result[name]['servable_entries_per_s']}/s,"
        f" all vectors {result[name]['indexed_entries_per_s']}/s,"
        f" repeats at once {result[name]['repeats_asked_at_once']}"
        for name in TARGETS
    ]
    return f"import of {result['num_questions']} {result['pairs']} questions: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="qqp_dev")
    parser.add_argument("--num", type=int, default=2000)
    args = parser.parse_args(argv)
    command = invocation(sys.argv[1:] if argv is None else argv)
    result = {"command": command, **measure(args.pairs, args.num)}
    print(summary_line(result))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""An exact hit's own work, in-process: this checkout against another commit, no sockets.

Each side runs in a child process with its ``src/`` on PYTHONPATH (``--rev``'s from a
temporary git worktree): the app is built from ``hasten serve``'s flags against one
loopback simulator, one request is asked twice (a miss, then an L1 hit), then the same
exact hit is driven over ASGI ``--num`` times. Reported per side: the whole call and the
moment the answer's last body message is sent (what the client waits for; the metrics'
bookkeeping after it is in the whole call only), p50 in microseconds, ``--runs`` runs in
turns. HTTP parsing and socket writes are left out on purpose: they are the same code on both
sides, and on a loopback they move by tens of microseconds between blocks of requests.
Prints one summary line and JSON.

    .venv/bin/python bench/overhead/hit_inprocess.py --rev 4044c49 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.support.server_process import REPO, invocation, rev_source

NUM_WARMUP = 2000
_QUESTION = "What is the capital of France? Say it briefly."


def child(upstream_url: str, num: int, is_stream: bool, workdir: str) -> dict[str, float]:
    """Runs in the child: the app of whichever ``hasten`` is on the path, driven in-process."""
    from hasten.app import HastenApp
    from hasten.cli import build_parser

    try:
        from hasten.server.run import resolve_config
    except ImportError:  # commits before the server package (4044c49)
        from hasten.server import resolve_config  # type: ignore[attr-defined,no-redef]

    flags = ["--upstream", upstream_url, "--sqlite-path", f"{workdir}/cache.sqlite3"]
    app = HastenApp(resolve_config(build_parser("serve").parse_args(["serve", *flags]), {}))
    body = json.dumps(
        {
            "model": "sim-model",
            "temperature": 0,
            "stream": is_stream,
            "messages": [{"role": "user", "content": _QUESTION}],
        }
    ).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer bench"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    return asyncio.run(_drive(app, scope, body, num))


async def _drive(app: Any, scope: dict[str, Any], body: bytes, num: int) -> dict[str, float]:
    sent_s: list[float] = []
    labels: list[bytes] = []

    async def one() -> None:
        is_read = False
        never = asyncio.Event()  # the client stays: a receive after the body waits

        async def receive() -> dict[str, Any]:
            nonlocal is_read
            if not is_read:
                is_read = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                labels.append(dict(message["headers"]).get(b"x-hasten-cache", b""))
            elif not message.get("more_body", False):
                sent_s.append(time.perf_counter())

        await app(dict(scope), receive, send)

    await app.startup()
    await one()  # the miss that stores the answer
    await asyncio.sleep(0.2)
    for _ in range(NUM_WARMUP):
        await one()
    if labels[-1] != b"hit":
        raise SystemExit(f"not an exact hit: x-hasten-cache {labels[-1]!r}")
    whole_s: list[float] = []
    to_sent_s: list[float] = []
    for _ in range(num):
        started_s = time.perf_counter()
        await one()
        whole_s.append(time.perf_counter() - started_s)
        to_sent_s.append(sent_s[-1] - started_s)
    await app.shutdown()
    return {
        "whole_p50_us": round(statistics.median(whole_s) * 1e6, 2),
        "to_sent_p50_us": round(statistics.median(to_sent_s) * 1e6, 2),
    }


def measure(rev: str, num: int, num_runs: int, is_stream: bool) -> dict[str, Any]:
    from tests.support.servers import SimulatorProcess  # not in the children: their hasten differs

    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hasten-hit-")))
        sides = {"this": REPO / "src", "rev": stack.enter_context(rev_source(rev, workdir))}
        sim = stack.enter_context(SimulatorProcess("--ttft-ms", "0", "--decode-ms", "0"))
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for number in range(num_runs):
            for name, src in sides.items():
                side_dir = workdir / f"{name}-{number}"
                side_dir.mkdir()
                argv = [sys.executable, __file__, "--child", sim.url, "--num", str(num)]
                argv += ["--workdir", str(side_dir), *(["--stream"] if is_stream else [])]
                env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{REPO}"}
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"rev": rev, "num": num, "is_stream": is_stream, "runs": runs}


def summary_line(result: dict[str, Any]) -> str:
    def figures(name: str, field: str) -> str:
        return "/".join(f"{run[field]:.1f}" for run in result["runs"][name])

    kind = "stream" if result["is_stream"] else "non-stream"
    return (
        f"hit_inprocess vs {result['rev']}, {kind} exact hit, p50 us per run: to the answer "
        f"sent {figures('this', 'to_sent_p50_us')} (this) vs {figures('rev', 'to_sent_p50_us')}; "
        f"whole call {figures('this', 'whole_p50_us')} vs {figures('rev', 'whole_p50_us')}"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="the commit to compare against")
    parser.add_argument("--num", type=int, default=20000, help="timed hits per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stream", action="store_true", help="a stream client's hit")
    parser.add_argument("--child", metavar="UPSTREAM_URL", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.num, args.stream, args.workdir)))
        return 0
    if not args.rev:
        parser.error("--rev is required")
    result = measure(args.rev, args.num, args.runs, args.stream)
    result["command"] = invocation(argv)
    print(summary_line(result))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hostile upstreams against ``hasten serve`` (issue 41): what the client saw, whether
anything was cached, and the gateway's memory before, at its peak during, and after each.

The upstream is ``tests/support/hostile.py`` (endless bodies and streams sent at a bounded
rate, lying content types, events after ``[DONE]``, streams without a finish reason or
usage, answers that go silent) in this process; the gateway is its own process, its
resident memory read from /proc: a fresh gateway per scenario (a process keeps most of what
it freed, which would hide the next scenario's peak), ``VmHWM`` reset once it is warm, so
``peak`` is that scenario's alone. ``--rev`` runs the same against another commit's gateway
(the same config, defaults only; the total timeout bounds what an unbounded gateway reads).

A second part measures what one large request costs everyone else: ``/healthz`` polled
every 5 ms while a client sends bodies of 90 000 messages (9 MB), latency percentiles with
and without that load, for each gateway.

    PYTHONPATH=src nice -n 10 .venv/bin/python bench/reliability/hostile.py [--rev 97f21a8] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.support.server_process import (  # noqa: E402
    ServerProcess,
    clean_environment,
    free_port,
    invocation,
    rev_source,
)
from tests.support.hostile import HostileUpstream  # noqa: E402
from tests.support.servers import ServerThread  # noqa: E402

MIB = 1024 * 1024
# What an unbounded gateway may read of an endless answer: this long at the upstream's rate.
DEFAULT_TOTAL_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0
URL = "/chat/completions"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    model: str  # the hostile upstream's behaviour
    path: str  # /chat/completions or /embeddings
    body: dict[str, Any]
    num_requests: int = 1


def _chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hostile"}], "temperature": 0, **extra}


SCENARIOS = (
    Scenario("endless JSON body (embeddings)", "endless-json", "/embeddings", {"input": "x"}),
    Scenario("endless JSON body (chat)", "endless-json", URL, _chat()),
    Scenario("endless stream, recorded", "endless-stream", URL, _chat(stream=True)),
    Scenario(
        "endless stream, not recorded", "endless-stream", URL, _chat(stream=True, temperature=1)
    ),
    Scenario("endless stream, non-stream client", "endless-stream", URL, _chat()),
    Scenario("endless tiny events", "endless-tiny-events", URL, _chat(stream=True)),
    Scenario("one endless event", "endless-event", URL, _chat(stream=True)),
    Scenario("endless error body (500)", "endless-error-500", URL, _chat()),
    Scenario("endless error body (400)", "endless-error-400", URL, _chat(stream=True)),
    Scenario("stream as application/json", "lying-json-stream", URL, _chat(stream=True)),
    Scenario("stream without content type", "lying-no-type-stream", URL, _chat(stream=True)),
    Scenario("stream as text/plain", "lying-text-stream", URL, _chat(stream=True)),
    Scenario("events after [DONE]", "events-after-done", URL, _chat(stream=True)),
    Scenario("[DONE] without finish_reason", "no-finish-reason", URL, _chat(stream=True)),
    Scenario("stream without usage", "no-usage", URL, _chat(stream=True, max_tokens=500)),
    Scenario("3 body reads timed out", "slow-body", "/embeddings", {"input": "x"}, 3),
    Scenario("3 streams timed out", "slow-stream", URL, _chat(stream=True), 3),
)


def _config(upstream_url: str, total_timeout_s: float) -> str:
    """The defaults (max_answer_bytes among them), so another commit reads it too."""
    return f"""
[upstreams.hostile]
url = "{upstream_url}/v1"
total_timeout_s = {total_timeout_s}
idle_timeout_s = {total_timeout_s}
max_retries = 0

[models."*"]
upstream = "hostile"

[cache]
backend = "memory"
"""


class Gateway:
    """``hasten serve`` as a child process, its memory read from /proc."""

    def __init__(self, label: str, workdir: Path, config: str, src: Path) -> None:
        self.label = label
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        path = workdir / f"{label}.toml"
        path.write_text(config)
        env = {**clean_environment(), "PYTHONPATH": str(src)}
        argv = [sys.executable, "-m", "hasten", "serve", "--port", str(self.port)]
        argv += ["--config", str(path), "--log-level", "error"]
        self.process = ServerProcess(label, argv, log_path=workdir / f"{label}.log", env=env)

    def __enter__(self) -> Gateway:
        self.process.start()
        self.process.wait_ready(self.url + "/healthz", READY_TIMEOUT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop()

    def status(self) -> dict[str, int]:
        fields = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
        return fields

    def reset_peak(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")


def _outcome(response: httpx.Response) -> str:
    """What the client saw: the status, and a stream's final error code if it had one."""
    if response.status_code != 200:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return f"{response.status_code} {response.json()['error']['code']}"
        return str(response.status_code)
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return "200"
    events = [e for e in response.text.split("\n\n") if e.startswith("data: {")]
    with contextlib.suppress(ValueError, IndexError):
        error = orjson.loads(events[-1][6:]).get("error")
        if isinstance(error, dict):
            return f"200, ends with {error.get('code')}"
    return "200, ends with [DONE]" if response.text.endswith("[DONE]\n\n") else "200, cut"


def run_scenario(
    gateway: Gateway, upstream: HostileUpstream, scenario: Scenario, index: int
) -> dict[str, Any]:
    body = {"model": scenario.model, **scenario.body, "probe": index}
    before = gateway.status()["VmRSS"]
    gateway.reset_peak()
    started_s = time.perf_counter()
    outcomes = []
    with httpx.Client(timeout=120) as client:
        for i in range(scenario.num_requests):
            response = client.post(gateway.url + "/v1" + scenario.path, json={**body, "n_probe": i})
            outcomes.append(_outcome(response))
        elapsed_s = time.perf_counter() - started_s
        peak = gateway.status()["VmHWM"]
        time.sleep(1.0)
        after = gateway.status()["VmRSS"]  # a second after, before the repeat below
        num_calls = upstream.calls[scenario.model]
        again = client.post(gateway.url + "/v1" + scenario.path, json={**body, "n_probe": 0})
        is_cached = again.headers.get("x-hasten-cache") == "hit" or (
            upstream.calls[scenario.model] == num_calls
        )
    return {
        "scenario": scenario.name,
        "client": outcomes[0] if len(set(outcomes)) == 1 else ", ".join(outcomes),
        "cached": is_cached,
        "rss_before_mib": round(before / MIB, 1),
        "rss_peak_mib": round(peak / MIB, 1),
        "rss_after_mib": round(after / MIB, 1),
        "growth_mib": round((peak - before) / MIB, 1),
        "seconds": round(elapsed_s, 2),
    }


# --- one large request against everyone else ------------------------------------------------


def _large_body(num_messages: int) -> bytes:
    messages = [{"role": "user", "content": f"m{i % 97}"} for i in range(num_messages)]
    return orjson.dumps({"model": "usage", "messages": messages, "max_tokens": 4})


def _poll(url: str, stop: threading.Event, latencies_ms: list[float]) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            started_s = time.perf_counter()
            client.get(url + "/healthz")
            latencies_ms.append((time.perf_counter() - started_s) * 1000.0)
            time.sleep(0.005)


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1], 2),
        "n": len(ordered),
    }


def healthz_under_large_bodies(gateway: Gateway, num_bodies: int) -> dict[str, Any]:
    """/healthz latency alone, then while ``num_bodies`` bodies of 90 000 messages go in."""
    body = _large_body(90_000)
    result: dict[str, Any] = {"body_mib": round(len(body) / MIB, 1)}
    for phase in ("idle", "large_bodies"):
        stop, latencies = threading.Event(), []
        poller = threading.Thread(target=_poll, args=(gateway.url, stop, latencies))
        poller.start()
        statuses = []
        with httpx.Client(timeout=120) as client:
            if phase == "idle":
                time.sleep(2.0)
            else:
                for _ in range(num_bodies):
                    headers = {"content-type": "application/json"}
                    response = client.post(gateway.url + "/v1" + URL, content=body, headers=headers)
                    statuses.append(response.status_code)
        stop.set()
        poller.join()
        result[phase] = _percentiles(latencies)
        if statuses:
            result["statuses"] = sorted(set(statuses))
    return result


@contextlib.contextmanager
def _sources(args: argparse.Namespace, workdir: Path) -> Iterator[dict[str, Path]]:
    """Each gateway's source tree, by label: this checkout's, and ``--rev``'s if given."""
    with contextlib.ExitStack() as stack:
        sources = {"HEAD": ROOT / "src"}
        if args.rev:
            sources[args.rev] = stack.enter_context(rev_source(args.rev, workdir))
        yield sources


def _fresh(label: str, workdir: Path, config: str, src: Path) -> Gateway:
    """A gateway started for one scenario alone: freed memory a process keeps (the
    allocator returns little of it) would hide the next scenario's peak."""
    gateway = Gateway(label, workdir, config, src)
    gateway.__enter__()
    with httpx.Client(timeout=60) as client:  # warm: imports, pools
        client.post(gateway.url + "/v1" + URL, json={"model": "usage", **_chat()})
    return gateway


def run(args: argparse.Namespace) -> dict[str, Any]:
    upstream = HostileUpstream(rate_bytes_per_s=args.rate_mib * MIB)
    upstream.slow_bytes = 4 * MIB
    results: dict[str, Any] = {"command": invocation(sys.argv[1:]), "gateways": {}}
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerThread(upstream) as server,
        _sources(args, Path(tmp)) as sources,
    ):
        config = _config(server.url, args.total_timeout_s)
        for label, src in sources.items():
            rows = []
            for index, scenario in enumerate(SCENARIOS):
                if args.only and args.only not in scenario.name:
                    continue
                gateway = _fresh(label, Path(tmp), config, src)
                try:
                    rows.append(run_scenario(gateway, upstream, scenario, index))
                finally:
                    gateway.__exit__()
                print(f"{label:>8} {rows[-1]}", file=sys.stderr)
            gateway = _fresh(label, Path(tmp), config, src)
            try:
                healthz = healthz_under_large_bodies(gateway, args.large_bodies)
            finally:
                gateway.__exit__()
            print(f"{label:>8} healthz {healthz}", file=sys.stderr)
            results["gateways"][label] = {"scenarios": rows, "healthz": healthz}
    return results


def summary_line(results: dict[str, Any]) -> str:
    parts = []
    for label, result in results["gateways"].items():
        rows = result["scenarios"]
        worst = max((row["growth_mib"] for row in rows), default=0.0)
        cached = sum(row["cached"] for row in rows if row["scenario"] != "stream without usage")
        busy = result["healthz"]["large_bodies"]
        parts.append(
            f"{label}: worst peak growth {worst:.0f} MiB, {cached} hostile answers cached, "
            f"/healthz p99 {busy.get('p99_ms')} ms under large bodies"
        )
    return "hostile: " + "; ".join(parts)


def markdown(results: dict[str, Any]) -> str:
    lines = []
    for label, result in results["gateways"].items():
        lines.append(f"**{label}**\n")
        lines.append("| scenario | client saw | cached | RSS before | peak | after |")
        lines.append("| --- | --- | --- | ---: | ---: | ---: |")
        for row in result["scenarios"]:
            lines.append(
                f"| {row['scenario']} | {row['client']} | {'yes' if row['cached'] else 'no'} "
                f"| {row['rss_before_mib']:.0f} MiB | {row['rss_peak_mib']:.0f} MiB "
                f"| {row['rss_after_mib']:.0f} MiB |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="also run this commit's gateway, side by side")
    parser.add_argument("--rate-mib", type=float, default=32.0, help="endless answers' MiB/s")
    parser.add_argument(
        "--total-timeout-s",
        type=float,
        default=DEFAULT_TOTAL_TIMEOUT_S,
        help="the upstream's total timeout: how long an unbounded gateway reads",
    )
    parser.add_argument("--large-bodies", type=int, default=5, help="9 MB bodies sent")
    parser.add_argument("--only", help="run only the scenarios whose name holds this")
    parser.add_argument("--json", action="store_true", help="print the JSON only")
    parser.add_argument("--markdown", action="store_true", help="print the tables too")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(summary_line(results))
    if args.markdown:
        print(markdown(results))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

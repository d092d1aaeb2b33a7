"""Soak: hours-long traffic compressed into a fixed-rate run, watching for leaks.

One `hasten serve` (SQLite L2) in front of the simulator gets a steady mix of cache hits,
misses, streams and clients that close mid-stream; every 10 s the gateway's resident memory
(its process tree), open file descriptors (/proc/PID/fd) and asyncio tasks (`GET /stats`
`tasks`) are sampled. Growth is measured after a warm-up (connection pools filled, L1 full:
its budget is set small so that a filling cache is not mistaken for a leak), and once more
idle, after the load stops. Prints one summary line plus JSON; `--plot PATH` writes the
series as a small SVG.

    PYTHONPATH=src nice -n 19 .venv/bin/python bench/reliability/soak.py [--quick] [--duration-s S]
        [--rate R] [--json] [--plot bench/results/soak.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import httpx
import orjson

from bench.support.mixed_load import Ask, Outcome, expected_text, fixed_rate, new_client
from bench.support.server_process import ServerProcess, clean_environment, free_port, invocation

REPO = Path(__file__).resolve().parents[2]
SAMPLE_EVERY_S = 10.0
READY_TIMEOUT_S = 60.0
IDLE_SETTLE_S = 5.0
# Small, so that L1 is full (and stays so) before warm-up ends: ~3 new 2.4 KB entries a
# second at 20 rps fill it in about 35 s.
L1_MAX_BYTES = 256 * 1024
NUM_HOT_QUESTIONS = 32
FRESH_PREFIX = "soak new question "
MB = 1024 * 1024
RSS_GROWTH_GOAL = 0.05
_REQUEST_TASK = "RequestResponseCycle.run_asgi"  # uvicorn's task per HTTP request


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    rss_mb: float
    fds: int
    tasks: int
    requests: int
    task_kinds: dict[str, int] = field(default_factory=dict)
    # Answers completed since the previous sample: their p99 shows when the machine was slow.
    p99_latency_ms: float = 0.0


@dataclass
class Counts:
    by_kind: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    wrong: int = 0
    total: int = 0
    latencies_s: list[float] = field(default_factory=list)  # since the last sample

    def take_p99_ms(self) -> float:
        """The p99 latency of the answers since the last call, in ms (0 if none)."""
        window, self.latencies_s = self.latencies_s, []
        if not window:
            return 0.0
        window.sort()
        return round(1000 * window[min(len(window) - 1, int(0.99 * len(window)))], 1)

    def add(self, kind: str, outcome: Outcome) -> None:
        self.total += 1
        if outcome.ask.disconnect_after is None:
            self.latencies_s.append(outcome.latency_s)
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if not outcome.is_ok:
            self.failed[kind] = self.failed.get(kind, 0) + 1
        elif outcome.ask.disconnect_after is None and outcome.text != expected_text(outcome.ask):
            self.wrong += 1


def kind_of(ask: Ask) -> str:
    if ask.disconnect_after is not None:
        return "client_disconnect"
    if ask.question.startswith(FRESH_PREFIX):
        return "miss_stream" if ask.stream else "miss"
    return "hot_stream" if ask.stream else "hot"


def soak_ask(index: int) -> Ask:
    """Per 20 requests: 9 hot (mostly hits), 4 hot streams, 3 misses (new questions,
    stored), 2 no-cache streams, 2 streams whose client leaves after 2 events."""
    slot = index % 20
    hot = f"soak hot question {index % NUM_HOT_QUESTIONS}"
    fresh = f"{FRESH_PREFIX}{index}"
    if slot < 9:
        return Ask("sim-model", hot)
    if slot < 13:
        return Ask("sim-model", hot, stream=True)
    if slot < 16:
        return Ask("sim-model", fresh)
    if slot < 18:
        return Ask("sim-model", fresh, stream=True, no_cache=True)
    return Ask("sim-model", fresh, stream=True, no_cache=True, no_store=True, disconnect_after=2)


@contextmanager
def started(workdir: Path) -> Iterator[tuple[str, ServerProcess, str]]:
    env = clean_environment()
    python = [sys.executable, "-m", "hasten"]
    sim_port, gw_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    config = workdir / "hasten.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {gw_port}\nlog_level = "warning"\n\n'
        f'[upstreams.sim]\nurl = "{sim_url}/v1"\n\n[models."*"]\nupstream = "sim"\n\n'
        f'[cache]\nbackend = "sqlite"\nsqlite_path = "{workdir / "cache.sqlite3"}"\n'
        f"l1_max_bytes = {L1_MAX_BYTES}\n"
    )
    simulator = ServerProcess(
        "simulator",
        [*python, "simulate", "--port", str(sim_port), "--ttft-ms", "20", "--decode-ms", "5"],
        log_path=workdir / "simulator.log",
        env=env,
    )
    gateway = ServerProcess(
        "hasten",
        [*python, "serve", "--config", str(config)],
        log_path=workdir / "hasten.log",
        env=env,
    )
    with ExitStack() as stack:
        for process in (simulator, gateway):
            stack.callback(process.stop)
            process.start()
        simulator.wait_ready(sim_url + "/v1/models", READY_TIMEOUT_S)
        gateway.wait_ready(f"http://127.0.0.1:{gw_port}/healthz", READY_TIMEOUT_S)
        yield f"http://127.0.0.1:{gw_port}", gateway, sim_url


def num_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def sample(
    client: httpx.AsyncClient, url: str, gateway: ServerProcess, t_s: float, requests: int
) -> Sample:
    stats = (await client.get(url + "/stats")).json()
    return Sample(
        t_s=round(t_s, 1),
        rss_mb=round(gateway.rss_bytes() / MB, 2),
        fds=num_fds(gateway.pid),
        tasks=int(stats["tasks"]),
        requests=requests,
        task_kinds=stats.get("task_kinds", {}),
    )


async def soak(
    url: str, gateway: ServerProcess, sim_url: str, duration_s: float, rate_rps: float
) -> dict[str, Any]:
    counts = Counts()
    samples: list[Sample] = []
    async with httpx.AsyncClient(timeout=10) as probe:
        idle_before = await sample(probe, url, gateway, 0.0, 0)
        started_s = time.monotonic()
        jitter = random.Random(0)

        async def sampler() -> None:
            while True:
                # Jittered: the load's schedule repeats every 20 requests, and a sampler
                # locked to its phase sees the same kinds of request in flight for minutes.
                await asyncio.sleep(SAMPLE_EVERY_S + jitter.uniform(-1.0, 1.0))
                t_s = time.monotonic() - started_s
                taken = await sample(probe, url, gateway, t_s, counts.total)
                samples.append(replace(taken, p99_latency_ms=counts.take_p99_ms()))

        sampling = asyncio.create_task(sampler())
        async with new_client() as client:
            run = await fixed_rate(
                client,
                url,
                soak_ask,
                rate_rps=rate_rps,
                duration_s=duration_s,
                on_outcome=lambda o: counts.add(kind_of(o.ask), o),
            )
        sampling.cancel()
        # The load's connections are closed now; what is still held after a pause stays.
        await asyncio.sleep(IDLE_SETTLE_S)
        idle_after = await sample(probe, url, gateway, time.monotonic() - started_s, counts.total)
        sim_stats = (await probe.get(sim_url + "/sim/stats")).json()
        gateway_stats = (await probe.get(url + "/stats")).json()
    return {
        "counts": counts,
        "run": run,
        "samples": samples,
        "idle_before": idle_before,
        "idle_after": idle_after,
        "sim_cancelled": sim_stats.get("num_cancelled"),
        "gateway_stats": gateway_stats,
    }


def live_requests(s: Sample) -> int:
    """HTTP requests in progress when the sample was taken, the sampling request excluded:
    each holds a few tasks and a descriptor or two, by design."""
    return sum(n for kind, n in s.task_kinds.items() if kind.startswith(_REQUEST_TASK)) - 1


def growth(samples: list[Sample], warmup_s: float) -> dict[str, Any]:
    """First vs last samples after warm-up: medians of three (one GC pause is not a trend).

    RSS from every sample. Descriptors and tasks from the quiet ones only (no request in
    flight but the sampling one): a request in flight holds three or four tasks and a
    socket or two by design, and how many are in flight at a sampling instant swings with
    the machine's load. With none in flight, anything above the idle count is held by
    nothing that is still running: a leak."""
    after = [s for s in samples if s.t_s >= warmup_s]
    if len(after) < 2:
        return {"error": "not enough samples after warm-up: run longer"}
    width = min(3, len(after) // 2)
    head, tail = after[:width], after[-width:]
    quiet = [s for s in after if live_requests(s) == 0]
    if len(quiet) < 2:
        return {"error": "no two samples without a request in flight: lower --rate"}
    quiet_width = min(3, len(quiet) // 2)
    quiet_head, quiet_tail = quiet[:quiet_width], quiet[-quiet_width:]

    def median(items: list[Sample], name: str) -> float:
        return float(statistics.median(getattr(s, name) for s in items))

    rss_start, rss_end = median(head, "rss_mb"), median(tail, "rss_mb")
    return {
        "samples_after_warmup": len(after),
        "quiet_samples": len(quiet),
        "rss_mb_start": rss_start,
        "rss_mb_end": rss_end,
        "rss_mb_max": max(s.rss_mb for s in after),
        "rss_growth": round((rss_end - rss_start) / rss_start, 4),
        "fds_start": median(quiet_head, "fds"),
        "fds_end": median(quiet_tail, "fds"),
        "fds_max_quiet": max(s.fds for s in quiet),
        "fds_max": max(s.fds for s in after),
        "tasks_start": median(quiet_head, "tasks"),
        "tasks_end": median(quiet_tail, "tasks"),
        "tasks_max_quiet": max(s.tasks for s in quiet),
        # A lone one is a request's task caught finishing (cancelled, not yet collected).
        "quiet_samples_above_idle": sum(s.tasks > quiet_head[0].tasks for s in quiet),
        "tasks_max": max(s.tasks for s in after),
        "max_live_requests": max(live_requests(s) for s in after),
    }


def verdict(g: dict[str, Any], idle_before: Sample, idle_after: Sample) -> dict[str, bool]:
    return {
        "rss_growth_under_5pct": bool(g.get("rss_growth", 1.0) < RSS_GROWTH_GOAL),
        "no_fd_growth": bool(g.get("fds_end", 1e9) <= g.get("fds_start", 0)),
        "no_task_growth": bool(g.get("tasks_end", 1e9) <= g.get("tasks_start", 0)),
        "tasks_back_to_idle": idle_after.tasks <= idle_before.tasks,
    }


# --- plot --------------------------------------------------------------------------------


def svg_plot(samples: list[Sample], warmup_s: float, title: str) -> str:
    """Three stacked line charts (RSS, fds, tasks) over time; no plotting library needed."""
    width, panel_h, left, top_pad = 720, 150, 70, 30
    series = [("RSS (MB)", "rss_mb", "#1f77b4"), ("open fds", "fds", "#2ca02c")]
    series.append(("asyncio tasks", "tasks", "#d62728"))
    height = top_pad + len(series) * (panel_h + 30)
    t_max = max((s.t_s for s in samples), default=1.0) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="18" font-size="13">{_escape(title)}</text>',
    ]
    plot_w = width - left - 20
    for row, (label, name, colour) in enumerate(series):
        y0 = top_pad + row * (panel_h + 30)
        values = [float(getattr(s, name)) for s in samples]
        low, high = (min(values), max(values)) if values else (0.0, 1.0)
        if high - low < 1e-9:
            low, high = low - 1, high + 1

        def x(t: float) -> float:
            return left + plot_w * t / t_max

        def y(v: float, y0: int = y0, low: float = low, high: float = high) -> float:
            return y0 + panel_h - panel_h * (v - low) / (high - low)

        parts.append(
            f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel_h}" '
            'fill="none" stroke="#ccc"/>'
        )
        warm_x = x(min(warmup_s, t_max))
        parts.append(
            f'<line x1="{warm_x:.1f}" y1="{y0}" x2="{warm_x:.1f}" y2="{y0 + panel_h}" '
            'stroke="#999" stroke-dasharray="4 3"/>'
        )
        points = " ".join(
            f"{x(s.t_s):.1f},{y(v):.1f}" for s, v in zip(samples, values, strict=True)
        )
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="4" y="{y0 + 12}">{_escape(label)}</text>')
        parts.append(f'<text x="4" y="{y0 + 28}">max {high:g}</text>')
        parts.append(f'<text x="4" y="{y0 + panel_h}">min {low:g}</text>')
        parts.append(f'<text x="{left + plot_w - 60}" y="{y0 + panel_h + 14}">{t_max:.0f} s</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- report ------------------------------------------------------------------------------


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    duration_s = args.duration_s or (180.0 if args.quick else 1800.0)
    warmup_s = min(120.0, max(30.0, duration_s / 6))
    workdir = Path(tempfile.mkdtemp(prefix="hasten-soak-"))
    try:
        with started(workdir) as (url, gateway, sim_url):
            raw = asyncio.run(soak(url, gateway, sim_url, duration_s, args.rate))
        log_lines = gateway.log_path.read_text(errors="replace").splitlines()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    counts: Counts = raw["counts"]
    samples: list[Sample] = raw["samples"]
    g = growth(samples, warmup_s)
    return {
        "benchmark": "soak",
        "command": command,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "rate_rps": args.rate,
        "sample_every_s": SAMPLE_EVERY_S,
        "l1_max_bytes": L1_MAX_BYTES,
        "machine": {"cores": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        "requests": counts.total,
        "by_kind": counts.by_kind,
        "failed": counts.failed,
        "wrong_answers": counts.wrong,
        "shed": raw["run"].shed,
        "hung": raw["run"].hung,
        "upstream_calls_cancelled": raw["sim_cancelled"],
        "client_disconnects_seen": raw["gateway_stats"]["requests"].get("client_disconnects"),
        "cache": raw["gateway_stats"]["cache"],
        "growth": g,
        "idle_before": _sample_dict(raw["idle_before"]),
        "idle_after": _sample_dict(raw["idle_after"]),
        "verdict": verdict(g, raw["idle_before"], raw["idle_after"]),
        "series": [_sample_dict(s) for s in samples],
        # Kept because the work dir is not: what the gateway complained about, if anything.
        "gateway_log_warnings": sum((" WARNING " in x or " ERROR " in x) for x in log_lines),
        "gateway_log_tail": log_lines[-10:],
    }


def _sample_dict(s: Sample) -> dict[str, Any]:
    row = {"t_s": s.t_s, "rss_mb": s.rss_mb, "fds": s.fds, "tasks": s.tasks, "req": s.requests}
    row["p99_latency_ms"] = s.p99_latency_ms
    return {**row, "live_requests": live_requests(s), "task_kinds": s.task_kinds}


def summary_line(result: dict[str, Any]) -> str:
    g = result["growth"]
    failed = sum(result["failed"].values())
    if "error" in g:
        return f"soak: {result['requests']} requests, {failed} failed; {g['error']}"
    return (
        f"soak: {result['duration_s']:.0f} s at {result['rate_rps']:g} rps, "
        f"{result['requests']} requests, {failed} failed, {result['wrong_answers']} wrong; "
        f"after {result['warmup_s']:.0f} s warm-up RSS {g['rss_mb_start']:.1f} -> "
        f"{g['rss_mb_end']:.1f} MB ({100 * g['rss_growth']:+.1f}%), fds {g['fds_start']:g} -> "
        f"{g['fds_end']:g}, tasks {g['tasks_start']:g} -> {g['tasks_end']:g}; idle tasks "
        f"{result['idle_before']['tasks']} -> {result['idle_after']['tasks']}, idle fds "
        f"{result['idle_before']['fds']} -> {result['idle_after']['fds']}"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 minutes instead of 30")
    parser.add_argument("--duration-s", type=float, default=None, help="run length in seconds")
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--json", action="store_true", help="stdout: the JSON only")
    parser.add_argument("--plot", type=Path, default=None, help="write the series as SVG here")
    args = parser.parse_args(argv)
    try:
        result = run(args, invocation(argv))
    except RuntimeError as exc:
        print(f"soak benchmark failed: {exc}", file=sys.stderr)
        return 1
    line = summary_line(result)
    print(line, file=sys.stderr if args.json else sys.stdout)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if args.plot is not None:
        samples = [
            Sample(s["t_s"], s["rss_mb"], s["fds"], s["tasks"], s["req"], s["task_kinds"])
            for s in result["series"]
        ]
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        args.plot.write_text(svg_plot(samples, result["warmup_s"], line.split(";")[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

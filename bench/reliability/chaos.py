"""Chaos: fixed-rate load through a real `hasten serve` while its dependencies fail.

Two gateways (one on SQLite with the local engine child, one on Redis) front two simulators
(`sim_a`, and `sim_b` as `sim_a`'s fallback for model `sim-model`; model `sim-solo` has only
`sim_a`). One fault per phase, injected mid-phase and then repaired:

    baseline         nothing
    redis_restart    redis-server stopped, then started again on its port and data dir
    sqlite_readonly  the SQLite file made unwritable, then writable again
    sqlite_corrupt   garbage written into the live SQLite file (header page, then pages)
    engine_kill      the engine child SIGKILLed (pid from /readyz); local requests meanwhile
    upstream_faults  sim_a injects 10% 500s, 10% 429s and 10% mid-stream disconnects

Every answer a sim model gives is checked against the simulator's text for that request
(mixed_load.expected_text): "wrong" counts answers that differ. At the end every distinct
deterministic request is asked again, from the cache and with `cache-control: no-cache`
(a fresh upstream answer), and the two compared. Prints one summary line plus JSON.

    PYTHONPATH=src nice -n 19 .venv/bin/python bench/reliability/chaos.py [--quick] [--json]
        [--no-engine]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import httpx
import orjson

from bench.support.mixed_load import Ask, Outcome, expected_text, fixed_rate, new_client, send
from bench.support.server_process import ServerProcess, clean_environment, free_port

REPO = Path(__file__).resolve().parents[2]
SIM_MODELS = ("sim-model", "sim-solo")
LOCAL_MODELS = ("local", "auto")
READY_TIMEOUT_S = 60.0
ENGINE_READY_TIMEOUT_S = 240.0
FAULT_RATES = {"error_rate": 0.1, "rate_limit_rate": 0.1, "disconnect_rate": 0.1}
# Short Retry-After on injected 429s keeps the bounded phases short; retries still honour it.
RETRY_AFTER_S = 0.5
# The WAL's shared-memory index is mmapped: an immutable one SIGBUSes SQLite (a crash, not a
# read-only disk), so only the database and its WAL are made unwritable.
READ_ONLY_FILES = ("", "-wal")
PAGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Plan:
    rate_rps: float
    phase_s: dict[str, float]


QUICK = Plan(
    rate_rps=12.0,
    phase_s={
        "baseline": 8,
        "redis_restart": 18,
        "sqlite_readonly": 16,
        "sqlite_corrupt": 16,
        "engine_kill": 24,
        "upstream_faults": 30,
    },
)
FULL = Plan(rate_rps=20.0, phase_s={name: 3 * s for name, s in QUICK.phase_s.items()})


# --- processes -------------------------------------------------------------------------


def hasten_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "hasten", *args]


def wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listening on port {port}") from None
            time.sleep(0.05)


class Redis:
    """redis-server on a fixed port and data dir (append-only file): stop it, start it again."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/ensure-redis.sh")
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir()
        self.argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.argv += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)]
        self.log = workdir / "redis.log"
        self.process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = ServerProcess("redis", self.argv, log_path=self.log).start()
        wait_port(self.port, READY_TIMEOUT_S)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class Gateway:
    name: str
    url: str
    process: ServerProcess
    sqlite_path: Path | None = None

    def get(self, path: str) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(self.url + path, timeout=10).json()
        return body


def gateway_config(
    path: Path, port: int, sims: dict[str, str], cache: str, with_engine: bool
) -> None:
    retry = "max_retries = 2\nbackoff_base_s = 0.05\nbackoff_max_s = 0.5\nmax_retry_after_s = 2"
    text = f'[server]\nhost = "127.0.0.1"\nport = {port}\nlog_level = "warning"\n\n'
    for name, url in sims.items():
        text += f'[upstreams.{name}]\nurl = "{url}/v1"\ntotal_timeout_s = 30\n{retry}\n\n'
    text += '[models."sim-model"]\nupstream = "sim_a"\nfallbacks = ["sim_b"]\n\n'
    text += '[models."sim-solo"]\nupstream = "sim_a"\n\n'
    # A small L1, so that most hits come from the L2 under test rather than from memory.
    text += f"[cache]\nl1_max_bytes = 32768\n{cache}\n\n"
    if with_engine:
        text += "[local]\nn_threads = 1\nmax_seqs = 4\nn_ctx = 2048\nrestart_backoff_s = 0.5\n\n"
        text += '[hybrid]\nmodel = "auto"\npolicy = "local-first"\ncloud_model = "sim-model"\n'
    path.write_text(text)


@contextlib.contextmanager
def started(workdir: Path, with_engine: bool) -> Iterator[dict[str, Any]]:
    env = clean_environment()
    processes: list[ServerProcess] = []
    redis = Redis(workdir)
    with contextlib.ExitStack() as stack:
        sims: dict[str, str] = {}
        for name in ("sim_a", "sim_b"):
            port = free_port()
            argv = hasten_command("simulate", "--port", str(port), "--ttft-ms", "20")
            argv += ["--decode-ms", "5", "--retry-after-s", str(RETRY_AFTER_S)]
            process = ServerProcess(name, argv, log_path=workdir / f"{name}.log", env=env)
            stack.callback(process.stop)
            processes.append(process.start())
            sims[name] = f"http://127.0.0.1:{port}"
        stack.callback(redis.stop)
        redis.start()
        gateways: dict[str, Gateway] = {}
        backends = {
            "sqlite": (f'backend = "sqlite"\nsqlite_path = "{workdir / "cache.sqlite3"}"', True),
            "redis": (f'backend = "redis"\nredis_url = "{redis.url}"', False),
        }
        for name, (cache, engine) in backends.items():
            port = free_port()
            config = workdir / f"{name}.toml"
            gateway_config(config, port, sims, cache, with_engine and engine)
            process = ServerProcess(
                f"hasten-{name}",
                hasten_command("serve", "--config", str(config)),
                log_path=workdir / f"hasten-{name}.log",
                env=env,
            )
            stack.callback(process.stop)
            processes.append(process.start())
            sqlite_path = workdir / "cache.sqlite3" if name == "sqlite" else None
            gateways[name] = Gateway(name, f"http://127.0.0.1:{port}", process, sqlite_path)
        for name, url in sims.items():
            next(p for p in processes if p.name == name).wait_ready(
                url + "/v1/models", READY_TIMEOUT_S
            )
        for gateway in gateways.values():
            timeout_s = ENGINE_READY_TIMEOUT_S if with_engine else READY_TIMEOUT_S
            gateway.process.wait_ready(gateway.url + "/healthz", timeout_s)
        if with_engine:
            wait_engine(gateways["sqlite"], lambda state: state == "ready")
        yield {"sims": sims, "redis": redis, "gateways": gateways, "workdir": workdir}


def wait_engine(gateway: Gateway, done: Callable[[str], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    while True:
        engine: dict[str, Any] = gateway.get("/readyz").get("engine", {})
        if done(str(engine.get("state"))):
            return engine
        if time.monotonic() > deadline:
            raise RuntimeError(f"engine state stayed {engine.get('state')!r}")
        time.sleep(0.1)


# --- faults ------------------------------------------------------------------------------


def set_read_only(path: Path, read_only: bool) -> str:
    """Root ignores file modes, so as root the files are made immutable (chattr +i), which
    also refuses writes on descriptors already open; otherwise chmod, which binds only
    descriptors opened afterwards (the gateway's open connection keeps writing)."""
    files = [Path(f"{path}{s}") for s in READ_ONLY_FILES if Path(f"{path}{s}").exists()]
    if os.geteuid() == 0 and shutil.which("chattr"):
        flag = "+i" if read_only else "-i"
        subprocess.run(["chattr", flag, *map(str, files)], check=True, capture_output=True)
        return f"chattr {flag}"
    for file in files:
        file.chmod(0o444 if read_only else 0o644)
    return "chmod 444" if read_only else "chmod 644"


def write_garbage(path: Path, seed: int, include_header: bool) -> str:
    """Random 4 KiB blocks over live pages of the file. The WAL is checkpointed into the file
    first (any process may): otherwise live pages sit in the WAL and in the gateway's page
    cache, and garbage would land only on pages nobody reads again."""
    with contextlib.closing(sqlite3.connect(path, timeout=5.0)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rng = random.Random(seed)
    num_pages = max(1, path.stat().st_size // PAGE_BYTES)
    first = 0 if include_header else min(1, num_pages - 1)
    pages = {rng.randrange(first, num_pages) for _ in range(8)} | ({0} if include_header else set())
    with path.open("r+b") as handle:
        for page in sorted(pages):
            handle.seek(page * PAGE_BYTES)
            handle.write(rng.randbytes(PAGE_BYTES))
        handle.flush()
        os.fsync(handle.fileno())
    return f"{len(pages)} pages of {num_pages} overwritten (header page: {include_header})"


def sim_config(url: str, changes: dict[str, float]) -> None:
    httpx.post(url + "/sim/config", json=changes, timeout=10).raise_for_status()


def kill_engine(gateway: Gateway) -> str:
    """SIGKILL, then waits for the supervisor to notice and for the new child to be ready."""
    engine = wait_engine(gateway, lambda state: state == "ready")
    pid = int(engine["pid"])
    os.kill(pid, signal.SIGKILL)
    killed_s = time.monotonic()
    down = wait_engine(gateway, lambda state: state != "ready")
    back = wait_engine(gateway, lambda state: state == "ready")
    return (
        f"SIGKILL to engine pid {pid}; seen as {down.get('state')!r}, new child pid "
        f"{back.get('pid')} ready {time.monotonic() - killed_s:.1f} s after the kill"
    )


# --- phases ------------------------------------------------------------------------------


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def is_wrong(outcome: Outcome) -> bool:
    ask = outcome.ask
    if not outcome.is_ok or ask.model not in SIM_MODELS or ask.disconnect_after is not None:
        return False
    return outcome.text != expected_text(ask)


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    failed = [o for o in outcomes if not o.is_ok]
    errors: dict[str, int] = {}
    for outcome in failed:
        errors[outcome.error or ""] = errors.get(outcome.error or "", 0) + 1
    return {
        "requests": len(outcomes),
        "failed": len(failed),
        "failure_rate": round(len(failed) / len(outcomes), 4) if outcomes else None,
        "wrong_answers": sum(is_wrong(o) for o in outcomes),
        "hits": sum(o.cache in ("hit", "semantic") for o in outcomes),
        "errors": dict(sorted(errors.items(), key=lambda item: -item[1])[:6]),
    }


def questions(phase: str, count: int) -> list[str]:
    return [f"{phase} question {i}: what is the weather like on day {i}?" for i in range(count)]


def sim_ask(phase: str, index: int, model: str = "sim-model", num_questions: int = 16) -> Ask:
    """Deterministic asks over a small set (hits after the first pass), 40% streams, every
    seventh with no-cache (an upstream call whose answer is stored again)."""
    question = questions(phase, num_questions)[index % num_questions]
    return Ask(model, question, stream=index % 5 < 2, no_cache=index % 7 == 0)


Scheduled = list[tuple[float, str, Callable[[], str]]]


async def run_phase(
    name: str,
    gateway: Gateway,
    plan: Plan,
    next_ask: Callable[[int], Ask],
    faults: Scheduled,
    *,
    sims: dict[str, str],
    healthy_path: bool | dict[str, bool],
) -> tuple[dict[str, Any], list[Outcome]]:
    duration_s = plan.phase_s[name]
    tally = Tally()
    stats_before = gateway.get("/stats")
    sims_before = {name: sim_stats(url) for name, url in sims.items()}

    async def inject() -> None:
        started_s = time.monotonic()
        for at_fraction, label, action in faults:
            await asyncio.sleep(max(0.0, started_s + at_fraction * duration_s - time.monotonic()))
            try:
                detail = await asyncio.to_thread(action)
            except Exception as exc:  # a fault that could not be injected is reported
                detail = f"FAILED: {type(exc).__name__}: {exc}"
            elapsed_s = round(time.monotonic() - started_s, 1)
            tally.events.append({"at_s": elapsed_s, "event": label, "detail": detail})

    async with new_client() as client:
        injector = asyncio.create_task(inject())
        counts = await fixed_rate(
            client,
            gateway.url,
            next_ask,
            rate_rps=plan.rate_rps,
            duration_s=duration_s,
            on_outcome=tally.add,
        )
        await injector
    stats_after = gateway.get("/stats")
    # What the simulators saw: how many calls reached each, and the faults they injected.
    upstream_calls = {
        name: _sim_delta(sims_before[name], sim_stats(url)) for name, url in sims.items()
    }
    result: dict[str, Any] = {
        "phase": name,
        "gateway": gateway.name,
        "duration_s": duration_s,
        **summarize(tally.outcomes),
        "shed": counts.shed,
        "hung": counts.hung,
        "events": tally.events,
        "cache_after": stats_after.get("cache", {}),
        "requests_counted_by_gateway": _delta(stats_before, stats_after),
        "upstream_calls": upstream_calls,
    }
    by_model = {}
    for model in sorted({o.ask.model for o in tally.outcomes}):
        for stream in (False, True):
            subset = [o for o in tally.outcomes if o.ask.model == model and o.ask.stream == stream]
            if subset:
                key = f"{model} {'stream' if stream else 'json'}"
                by_model[key] = summarize(subset)
    result["by_model"] = by_model
    result["healthy_path"] = healthy_path
    return result, tally.outcomes


SIM_COUNTERS = ("num_requests", "num_errors_injected", "num_rate_limited", "num_disconnects")


def sim_stats(url: str) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(url + "/sim/stats", timeout=10).json()
    return stats


def _sim_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    return {name: int(after[name]) - int(before[name]) for name in SIM_COUNTERS}


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    old, new = before.get("requests", {}), after.get("requests", {})
    return {k: int(v) - int(old.get(k, 0)) for k, v in new.items() if int(v) != int(old.get(k, 0))}


async def run_all(env: dict[str, Any], plan: Plan, with_engine: bool) -> dict[str, Any]:
    sqlite_gw: Gateway = env["gateways"]["sqlite"]
    redis_gw: Gateway = env["gateways"]["redis"]
    redis: Redis = env["redis"]
    sim_a = env["sims"]["sim_a"]
    assert sqlite_gw.sqlite_path is not None
    db = sqlite_gw.sqlite_path
    phases: list[dict[str, Any]] = []
    served: dict[str, list[Outcome]] = {"sqlite": [], "redis": []}

    async def phase(
        name: str,
        gateway: Gateway,
        next_ask: Callable[[int], Ask],
        faults: Scheduled,
        healthy_path: bool | dict[str, bool] = True,
    ) -> None:
        result, outcomes = await run_phase(
            name, gateway, plan, next_ask, faults, sims=env["sims"], healthy_path=healthy_path
        )
        phases.append(result)
        served[gateway.name].extend(outcomes)

    await phase("baseline", sqlite_gw, lambda i: sim_ask("baseline", i), [])
    await phase(
        "redis_restart",
        redis_gw,
        lambda i: sim_ask("redis", i),
        [
            (1 / 3, "redis-server stopped", _returning(redis.stop, "SIGTERM, waited for exit")),
            (2 / 3, "redis-server started", _returning(redis.start, "same port and data dir")),
        ],
    )
    await phase(
        "sqlite_readonly",
        sqlite_gw,
        lambda i: sim_ask("readonly", i),
        [
            (0.25, "SQLite file read-only", lambda: set_read_only(db, True)),
            (0.7, "SQLite file writable", lambda: set_read_only(db, False)),
        ],
    )
    await phase(
        "sqlite_corrupt",
        sqlite_gw,
        lambda i: sim_ask("corrupt", i),
        [
            (0.3, "garbage written", lambda: write_garbage(db, 1, include_header=True)),
            (0.65, "garbage written", lambda: write_garbage(db, 2, include_header=False)),
        ],
    )
    if with_engine:
        await phase(
            "engine_kill",
            sqlite_gw,
            engine_ask,
            [(0.25, "engine child killed", lambda: kill_engine(sqlite_gw))],
            # "local" has no other upstream; "auto" (hybrid) falls back to the simulators.
            healthy_path={"local": False, "auto": True, "sim-model": True},
        )
        with contextlib.suppress(RuntimeError):
            await asyncio.to_thread(wait_engine, sqlite_gw, lambda s: s == "ready")
    sim_config(sim_a, FAULT_RATES)
    try:
        await phase(
            "upstream_faults",
            sqlite_gw,
            fault_ask,
            [],
            # sim-solo has sim_a only; a stream cut after bytes reached the client cannot
            # be retried by anyone, so only sim-model's non-stream answers have a sure path.
            healthy_path={"sim-model json": True, "sim-model stream": False, "sim-solo": False},
        )
    finally:
        sim_config(sim_a, dict.fromkeys(FAULT_RATES, 0.0))
    replay = {name: await replay_check(env["gateways"][name], served[name]) for name in served}
    return {"phases": phases, "replay": replay}


def _returning(action: Callable[[], None], detail: str) -> Callable[[], str]:
    def run() -> str:
        action()
        return detail

    return run


def engine_ask(index: int) -> Ask:
    """Half cached simulator traffic, half local-model requests that must reach the engine
    (no-cache, no-store): a quarter `local` (no fallback), a quarter `auto` (hybrid)."""
    if index % 4 == 1:
        return Ask("local", f"Name a colour, {index % 6}.", no_cache=True, no_store=True,
                   max_tokens=8, stream=index % 8 == 1)  # fmt: skip
    if index % 4 == 3:
        return Ask("auto", f"Say hello to {index % 6}.", no_cache=True, no_store=True,
                   max_tokens=8, stream=index % 8 == 3)  # fmt: skip
    return sim_ask("engine", index)


def fault_ask(index: int) -> Ask:
    """Mostly upstream calls (a larger question set, a third no-cache), half each model."""
    model = SIM_MODELS[index % 2]
    ask = sim_ask("faults", index // 2, model=model, num_questions=64)
    return Ask(model, ask.question, stream=ask.stream, no_cache=index % 3 == 0)


async def replay_check(gateway: Gateway, outcomes: list[Outcome]) -> dict[str, Any]:
    """Each distinct deterministic request again: what the cache serves now vs a fresh
    answer (no-cache, through the gateway, faults off) vs the simulator's text."""
    distinct = {
        (o.ask.model, o.ask.question) for o in outcomes if o.ask.model in SIM_MODELS and o.is_ok
    }
    checked = hits = differ = wrong = failed = 0
    examples: list[str] = []
    async with new_client() as client:
        for model, question in sorted(distinct):
            cached = await send(client, gateway.url, Ask(model, question))
            fresh = await send(client, gateway.url, Ask(model, question, no_cache=True))
            checked += 1
            if not (cached.is_ok and fresh.is_ok):
                failed += 1
                continue
            want = expected_text(Ask(model, question))
            if cached.cache == "hit":
                hits += 1
                if cached.text != fresh.text:
                    differ += 1
                    examples.append(f"{model} {question!r}: {cached.text!r} vs {fresh.text!r}")
            wrong += (cached.text != want) + (fresh.text != want)
    return {
        "distinct_requests": checked,
        "served_from_cache": hits,
        "cached_differs_from_fresh": differ,
        "differs_from_simulator": wrong,
        "failed": failed,
        "examples": examples[:5],
    }


# --- report ------------------------------------------------------------------------------


def summary_line(result: dict[str, Any]) -> str:
    parts = [f"{p['phase']} {p['failed']}/{p['requests']} failed" for p in result["phases"]]
    wrong = sum(p["wrong_answers"] for p in result["phases"])
    replay = result["replay"]
    hits = sum(r["served_from_cache"] for r in replay.values())
    differ = sum(r["cached_differs_from_fresh"] for r in replay.values())
    return (
        f"chaos: {'; '.join(parts)}; wrong answers {wrong}; "
        f"replay: {hits} cached answers checked, {differ} differ from a fresh one"
    )


def invocation(argv: list[str]) -> str:
    def relative(path: str) -> str:
        absolute = Path(path).absolute()
        return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else path

    return shlex.join([relative(sys.executable), relative(sys.argv[0]), *argv])


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    plan = QUICK if args.quick else FULL
    with_engine = not args.no_engine
    workdir = Path(tempfile.mkdtemp(prefix="hasten-chaos-"))
    started_s = time.monotonic()
    try:
        with started(workdir, with_engine) as env:
            setup_s = time.monotonic() - started_s
            body = asyncio.run(run_all(env, plan, with_engine))
    finally:
        # An interrupted read-only phase must not leave an undeletable file behind.
        with contextlib.suppress(Exception):
            set_read_only(workdir / "cache.sqlite3", False)
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "benchmark": "chaos",
        "command": command,
        "quick": args.quick,
        "rate_rps": plan.rate_rps,
        "engine": with_engine,
        "fault_rates_sim_a": FAULT_RATES,
        "machine": {"cores": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        "setup_s": round(setup_s, 1),
        "total_s": round(time.monotonic() - started_s, 1),
        **body,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short phases: about 2-3 minutes")
    parser.add_argument("--json", action="store_true", help="stdout: the JSON only")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine-kill phase")
    args = parser.parse_args(argv)
    try:
        result = run(args, invocation(argv))
    except RuntimeError as exc:
        print(f"chaos benchmark failed: {exc}", file=sys.stderr)
        return 1
    # With --json stdout is the JSON alone; the summary line still goes to stderr.
    print(summary_line(result), file=sys.stderr if args.json else sys.stdout)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

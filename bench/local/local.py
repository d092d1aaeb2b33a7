"""Local edge engine vs llama-cpp-python's bundled server, same GGUF, same thread count,
and the cost of the gateway's process boundary.

Servers, each in turn (never two at once, they would share the cores), in alternating
rounds: ``hasten`` is ``hasten local`` (the engine in the serving process: the in-process
figure), ``gateway`` is ``hasten serve`` with the engine as its supervised child (what
users run; cache off so every request reaches the engine), ``llama_cpp`` is the bundled
``llama_cpp.server``. Measures aggregate decode tok/s at 1, 2, 4, 8 concurrent streams;
TTFT with a shared ~300-token system prompt, warm vs cold; streams cut off before their
finish_reason; peak RSS; and the gateway's per-token overhead in microseconds.

    .venv/bin/python bench/local/local.py --quick          # a few minutes
    .venv/bin/python bench/local/local.py --json > out.json
    .venv/bin/python bench/local/local.py --ceiling --no-servers   # raw llama.cpp batched decode

The baseline installs itself on first use into bench/.venvs/llama-server: the same portable
engine wheel plus llama-cpp-python's ``server`` extra (starlette, fastapi, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from hasten.config.local import default_model_path  # noqa: E402

STREAM_LEVELS = (1, 2, 4, 8)
SYSTEM_SENTENCE = "You are the support assistant of a hardware store that sells tools and paint. "
TOPICS = ("a lighthouse", "a robot", "the sea", "a forest", "a city", "a dragon", "a cat", "rain")


@dataclass
class StreamResult:
    num_tokens: int = 0
    ttft_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def is_cut_off(self) -> bool:
        return self.finish_reason is None


@dataclass
class ServerReport:
    name: str
    decode_tok_s: dict[int, float] = field(default_factory=dict)
    ttft_cold_ms: float = 0.0
    ttft_warm_ms: float = 0.0
    num_cut_off: int = 0
    num_streams: int = 0
    peak_rss_mb: float = 0.0
    # hasten only: the engine's chosen step mode per kind of step after each level.
    step_modes: dict[int, dict[str, str]] = field(default_factory=dict)
    cpu_us_per_token: dict[int, float] = field(default_factory=dict)
    pid: int = 0

    @property
    def ttft_speedup(self) -> float:
        return self.ttft_cold_ms / self.ttft_warm_ms if self.ttft_warm_ms else 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BASELINE_VENV = ROOT / "bench" / ".venvs" / "llama-server"
SERVER_NAMES = ("hasten", "gateway", "llama_cpp")


def baseline_python() -> Path:
    """The baseline's own venv, made on first use from the project's portable wheel."""
    python = BASELINE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import llama_cpp.server, fastapi, sse_starlette"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    wheel = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "engine_wheel.py")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"installing llama_cpp.server into {BASELINE_VENV} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(BASELINE_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[server]"], check=True)
    return python


def _engine_flags(model: Path, num_threads: int, n_ctx: int) -> list[str]:
    return [
        "--model-path",
        str(model),
        "--n-threads",
        str(num_threads),
        "--n-ctx",
        str(n_ctx),
        "--max-seqs",
        "8",
        "--max-queue",
        "64",
    ]


# For the boundary A/B only: both engines on fixed thread counts (no tuning), so the two
# differ in nothing but the process boundary. The tuner's state otherwise drifts apart
# between two engines by up to 30% in tok/s on this shared box.
FIXED_MODES = {"thread_probe_steps": 0, "n_threads_single_token": 2}


def _gateway_config(
    model: Path, num_threads: int, n_ctx: int, extra: dict[str, int] | None = None
) -> Path:
    path = ROOT / "bench" / "results" / f"local-gateway-{os.getpid()}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{key} = {value}\n" for key, value in (extra or {}).items())
    path.write_text(
        f'[local]\nmodel_path = "{model}"\nn_threads = {num_threads}\nn_ctx = {n_ctx}\n'
        "max_seqs = 8\nmax_queue = 64\n" + lines
    )
    return path


def _server_command(
    name: str,
    model: Path,
    port: int,
    num_threads: int,
    n_ctx: int,
    extra: dict[str, int] | None = None,
) -> list[str]:
    if name == "hasten":
        local = [sys.executable, "-m", "hasten", "local", "--port", str(port)]
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in (extra or {}).items()]
        return local + _engine_flags(model, num_threads, n_ctx) + flags
    if name == "gateway":
        config = _gateway_config(model, num_threads, n_ctx, extra)
        return [
            sys.executable,
            "-m",
            "hasten",
            "serve",
            "--port",
            str(port),
            "--config",
            str(config),
            "--no-cache",
            "--log-level",
            "warning",
        ]
    return [
        str(baseline_python()),
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--port",
        str(port),
        "--n_threads",
        str(num_threads),
        "--n_threads_batch",
        str(num_threads),
        "--n_ctx",
        str(n_ctx),
        "--model_alias",
        "local",
        "--verbose",
        "False",
    ]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _stream(
    client: httpx.AsyncClient, messages: list[dict[str, str]], max_tokens: int, seed: int
) -> StreamResult:
    body = {
        "model": "local",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.8,
        "seed": seed,
    }
    result = StreamResult()
    started_s = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:]).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    result.num_tokens += 1
                    if result.ttft_s is None:
                        result.ttft_s = time.perf_counter() - started_s
                result.finish_reason = choices[0].get("finish_reason") or result.finish_reason
    except httpx.HTTPError as exc:
        result.error = repr(exc)
    return result


async def _decode_level(
    client: httpx.AsyncClient, num_streams: int, max_tokens: int, report: ServerReport
) -> None:
    def messages(index: int) -> list[dict[str, str]]:
        topic = TOPICS[index % len(TOPICS)]
        return [{"role": "user", "content": f"Write a long story about {topic}."}]

    started_s = time.perf_counter()
    cpu_before_s = _cpu_s(report.pid)
    results = await asyncio.gather(
        *(_stream(client, messages(index), max_tokens, index) for index in range(num_streams))
    )
    elapsed_s = time.perf_counter() - started_s
    num_tokens = sum(r.num_tokens for r in results)
    report.decode_tok_s[num_streams] = num_tokens / elapsed_s
    # CPU of the serving process itself (for the gateway: not its engine child), per token:
    # what the hop costs a machine whose cores the engine needs.
    report.cpu_us_per_token[num_streams] = (
        (_cpu_s(report.pid) - cpu_before_s) / max(num_tokens, 1) * 1e6
    )
    report.num_cut_off += sum(r.is_cut_off for r in results)
    report.num_streams += num_streams
    if report.name == "hasten":
        health = (await client.get("/health")).json()
        report.step_modes[num_streams] = health.get("step_modes", {})


async def _ttft_ms(client: httpx.AsyncClient, system: str, question: str) -> float:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    result = await _stream(client, messages, 2, 0)
    if result.ttft_s is None:
        raise RuntimeError(f"no first token: {result}")
    return result.ttft_s * 1000.0


async def _measure(base_url: str, report: ServerReport, max_tokens: int, num_reps: int) -> None:
    system = SYSTEM_SENTENCE * 20  # ~300 tokens
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await _stream(client, [{"role": "user", "content": "Hello"}], 4, 0)  # warm-up
        for num_streams in STREAM_LEVELS:
            await _decode_level(client, num_streams, max_tokens, report)
        cold, warm = [], []
        for rep in range(num_reps):
            # A nonce up front defeats any prefix cache: the whole prompt is computed.
            cold.append(await _ttft_ms(client, f"Session {rep} {time.time_ns()}. {system}", "Hi"))
        await _ttft_ms(client, system, "Do you sell nails?")  # primes the shared prefix
        for rep in range(num_reps):
            warm.append(await _ttft_ms(client, system, f"Question {rep}: do you sell paint?"))
        report.ttft_cold_ms = statistics.median(cold)
        report.ttft_warm_ms = statistics.median(warm)


def run_server(name: str, args: argparse.Namespace) -> ServerReport:
    port = _free_port()
    command = _server_command(name, args.model, port, args.threads, args.n_ctx)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        report = ServerReport(name, pid=proc.pid)
        try:
            _wait_ready(f"http://127.0.0.1:{port}", proc, stderr)
            asyncio.run(_measure(f"http://127.0.0.1:{port}", report, args.max_tokens, args.reps))
            # The gateway's figure includes its engine child: what the user's machine holds.
            report.peak_rss_mb = sum(_peak_rss_mb(pid) for pid in _process_tree(proc.pid))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return report


def _process_tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids += _process_tree(int(child))
    return pids


def interleaved(args: argparse.Namespace, num_reps: int) -> dict[str, Any]:
    """In-process vs child, both up at once and asked in turn, one request at a time.

    An idle engine takes no CPU, so the one being asked has the cores to itself, and any
    drift in the machine's load hits both alike: a fairer A/B of the process boundary than
    phases minutes apart. Both run ``FIXED_MODES``. Per rep: a warm TTFT; then (after all
    of those) a cold TTFT and aggregate tok/s at 1, 2, 4 and 8 concurrent 48-token streams.
    """
    servers = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with contextlib.ExitStack() as stack:
        try:
            for name in ("hasten", "gateway"):
                port = _free_port()
                command = _server_command(
                    name, args.model, port, args.threads, args.n_ctx, FIXED_MODES
                )
                stderr = stack.enter_context(tempfile.TemporaryFile())
                proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
                servers[name] = (proc, f"http://127.0.0.1:{port}")
                _wait_ready(servers[name][1], proc, stderr)
            return asyncio.run(_interleave({n: url for n, (_, url) in servers.items()}, num_reps))
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=30)


async def _interleave(urls: dict[str, str], num_reps: int) -> dict[str, Any]:
    system = SYSTEM_SENTENCE * 20
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in urls}

    def add(name: str, figure: str, value: float) -> None:
        samples[name].setdefault(figure, []).append(value)

    clients = {name: httpx.AsyncClient(base_url=url, timeout=600) for name, url in urls.items()}
    try:
        for client in clients.values():
            await _ttft_ms(client, system, "Do you sell nails?")  # primes the shared prefix
        # Warm TTFTs first, streams after: a story's own prompt may take the cache slot
        # that holds the shared system prompt.
        for rep in range(num_reps):
            for name in list(urls) if rep % 2 == 0 else list(urls)[::-1]:
                add(name, "ttft_warm", await _ttft_ms(clients[name], system, f"Q{rep}: paint?"))
        for rep in range(num_reps):
            for name in list(urls) if rep % 2 == 0 else list(urls)[::-1]:
                nonce = f"Session {rep} {time.time_ns()}. {system}"
                add(name, "ttft_cold", await _ttft_ms(clients[name], nonce, "Hi"))
                for level in STREAM_LEVELS:
                    add(name, f"tok_s_{level}", await _level_tok_s(clients[name], level, rep))
    finally:
        for client in clients.values():
            await client.aclose()
    medians = {
        name: {figure: statistics.median(values) for figure, values in figures.items()}
        for name, figures in samples.items()
    }
    direct, child = medians["hasten"], medians["gateway"]
    # tok/s: child / in-process; TTFT: in-process / child; 1.0 is parity either way.
    ratios = {
        figure: (child[figure] / direct[figure])
        if figure.startswith("tok_s")
        else (direct[figure] / child[figure])
        for figure in direct
    }
    return {
        "num_reps": num_reps,
        "medians": medians,
        "child_vs_in_process": ratios,
        "child_within_5pct": all(value >= 0.95 for value in ratios.values()),
    }


async def _level_tok_s(client: httpx.AsyncClient, num_streams: int, rep: int) -> float:
    started_s = time.perf_counter()
    results = await asyncio.gather(
        *(
            _stream(client, [{"role": "user", "content": f"Tell a story about {topic}."}], 48, rep)
            for topic in TOPICS[:num_streams]
        )
    )
    return sum(r.num_tokens for r in results) / (time.perf_counter() - started_s)


def merge_rounds(reports: list[ServerReport]) -> ServerReport:
    """One report per server: the median of each figure over the rounds."""
    merged = ServerReport(reports[0].name)
    for level in STREAM_LEVELS:
        merged.decode_tok_s[level] = statistics.median(r.decode_tok_s[level] for r in reports)
    merged.ttft_cold_ms = statistics.median(r.ttft_cold_ms for r in reports)
    merged.ttft_warm_ms = statistics.median(r.ttft_warm_ms for r in reports)
    merged.num_cut_off = sum(r.num_cut_off for r in reports)
    merged.num_streams = sum(r.num_streams for r in reports)
    merged.peak_rss_mb = max(r.peak_rss_mb for r in reports)
    merged.step_modes = reports[-1].step_modes
    for level in STREAM_LEVELS:
        merged.cpu_us_per_token[level] = statistics.median(
            r.cpu_us_per_token[level] for r in reports
        )
    return merged


def _wait_ready(base_url: str, proc: subprocess.Popen[bytes], stderr: Any) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stderr.seek(0)
            raise RuntimeError(f"server exited: {stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{base_url}/v1/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not start")


def _print_table(reports: list[ServerReport]) -> None:
    print(
        f"{'server':<10}"
        + "".join(f"{f'{n} str tok/s':>14}" for n in STREAM_LEVELS)
        + f"{'TTFT cold':>11}{'TTFT warm':>11}{'speedup':>9}{'cut off':>9}{'peak MB':>9}"
    )
    for r in reports:
        print(
            f"{r.name:<10}"
            + "".join(f"{r.decode_tok_s[n]:>14.1f}" for n in STREAM_LEVELS)
            + f"{r.ttft_cold_ms:>9.0f}ms{r.ttft_warm_ms:>9.0f}ms{r.ttft_speedup:>8.1f}x"
            + f"{r.num_cut_off:>5}/{r.num_streams:<3}{r.peak_rss_mb:>9.0f}"
        )


def _goals(reports: dict[str, ServerReport]) -> dict[str, Any]:
    goals: dict[str, Any] = {}
    ours = reports.get("gateway") or reports.get("hasten")
    if ours is not None:
        goals |= {
            "scaling_8_vs_1": ours.decode_tok_s[8] / ours.decode_tok_s[1],
            "warm_ttft_speedup": ours.ttft_speedup,
            "num_cut_off": sum(r.num_cut_off for r in reports.values()),
            "peak_rss_mb": ours.peak_rss_mb,
        }
    base = reports.get("llama_cpp")
    for name in ("hasten", "gateway"):
        if base is not None and name in reports:
            goals[f"{name}_vs_baseline"] = {
                n: reports[name].decode_tok_s[n] / base.decode_tok_s[n] for n in STREAM_LEVELS
            }
    direct, gateway = reports.get("hasten"), reports.get("gateway")
    if direct is not None and gateway is not None:
        # The process boundary and the gateway hop: ratios (tok/s: child / in-process;
        # TTFT: in-process / child, so 1.0 is parity and > 0.95 meets the goal everywhere).
        ratios = {
            f"tok_s_{n}": gateway.decode_tok_s[n] / direct.decode_tok_s[n] for n in STREAM_LEVELS
        }
        ratios["ttft_cold"] = direct.ttft_cold_ms / gateway.ttft_cold_ms
        ratios["ttft_warm"] = direct.ttft_warm_ms / gateway.ttft_warm_ms
        goals["child_vs_in_process"] = ratios
        goals["child_within_5pct"] = all(value >= 0.95 for value in ratios.values())
        goals["per_token_wall_overhead_us"] = {
            n: (1 / gateway.decode_tok_s[n] - 1 / direct.decode_tok_s[n]) * 1e6 * n
            for n in STREAM_LEVELS
        }
        goals["gateway_cpu_us_per_token"] = gateway.cpu_us_per_token
    return goals


def raw_decode_tok_s(
    model_path: Path, num_threads: int, num_seqs: int, num_steps: int
) -> tuple[float, float]:
    """llama.cpp alone, in-process: ``num_seqs`` sequences decoding one token each per step;
    returns (tok/s, tokens per CPU second).

    The ceiling for the engine's batching: what one batched ``llama_decode`` gains over
    ``num_seqs`` single-token ones on this CPU, with no Python, HTTP or sampling around it.
    """
    import llama_cpp

    from hasten.local.model import ContextParams, LocalModel

    model = LocalModel(model_path)
    ctx = model.create_context(ContextParams(2048, num_seqs, 256, num_threads, num_threads))
    batch = llama_cpp.llama_batch_init(256, 0, 1)
    prompt = model.tokenize(model.render_chat([{"role": "user", "content": "Tell a story."}]))

    def decode(rows: list[tuple[int, int, int]]) -> None:
        for index, (token, pos, seq_id) in enumerate(rows):
            batch.token[index], batch.pos[index] = token, pos
            batch.n_seq_id[index], batch.seq_id[index][0] = 1, seq_id
            batch.logits[index] = True
        batch.n_tokens = len(rows)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    try:
        for seq_id in range(num_seqs):
            decode([(token, pos, seq_id) for pos, token in enumerate(prompt)])
        started_s, cpu_started_s = time.perf_counter(), time.process_time()
        for step in range(num_steps):
            decode([(100 + seq_id, len(prompt) + step, seq_id) for seq_id in range(num_seqs)])
        num_tokens = num_seqs * num_steps
        # Per CPU second too: on one thread that is the build's own speed, whatever else
        # the machine runs (wall time is not, on a shared 2-core box).
        cpu_s = time.process_time() - cpu_started_s
        return num_tokens / (time.perf_counter() - started_s), num_tokens / max(cpu_s, 1e-9)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        model.close()


def _ceiling(args: argparse.Namespace) -> dict[str, dict[str, dict[int, float]]]:
    """``tok_s`` and ``tok_per_cpu_s`` per thread count and number of sequences."""
    wall: dict[str, dict[int, float]] = {}
    cpu: dict[str, dict[int, float]] = {}
    for threads in sorted({1, args.threads}):
        for num_seqs in STREAM_LEVELS:
            steps = 32 if args.quick else 96
            tok_s, tok_per_cpu_s = raw_decode_tok_s(args.model, threads, num_seqs, steps)
            wall.setdefault(f"{threads}_threads", {})[num_seqs] = tok_s
            cpu.setdefault(f"{threads}_threads", {})[num_seqs] = tok_per_cpu_s
    return {"tok_s": wall, "tok_per_cpu_s": cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short streams, fewer repetitions")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--no-baseline", action="store_true", help="skip llama_cpp.server")
    parser.add_argument("--no-servers", action="store_true", help="skip every server")
    parser.add_argument(
        "--servers", default=",".join(SERVER_NAMES), help="comma-separated subset to run"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds; figures are medians"
    )
    parser.add_argument(
        "--interleaved-reps",
        type=int,
        default=20,
        help="in-process vs child asked in turn, both running (0: skip)",
    )
    parser.add_argument(
        "--ceiling", action="store_true", help="also measure raw llama.cpp batched decode"
    )
    args = parser.parse_args(argv)
    args.model = args.model or default_model_path()
    args.max_tokens = 48 if args.quick else 128
    args.reps = 3 if args.quick else 5
    load_before = os.getloadavg()
    ceiling = _ceiling(args) if args.ceiling else None
    names = [] if args.no_servers else args.servers.split(",")
    if args.no_baseline and "llama_cpp" in names:
        names.remove("llama_cpp")
    rounds: dict[str, list[ServerReport]] = {name: [] for name in names}
    for index in range(args.rounds):
        # Alternating order: drift in the machine's load lands on every server alike.
        for name in names if index % 2 == 0 else names[::-1]:
            rounds[name].append(run_server(name, args))
    reports = {name: merge_rounds(runs) for name, runs in rounds.items() if runs}
    goals = _goals(reports) if reports else {}
    is_ab = args.interleaved_reps > 0 and {"hasten", "gateway"} <= set(names)
    if is_ab:
        goals["interleaved"] = interleaved(args, args.interleaved_reps)
    settings = {
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "model": str(args.model),
        # Other jobs on the machine change every figure here: recorded with them.
        "load_avg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        doc = {
            "settings": settings,
            "servers": [asdict(r) | {"ttft_speedup": r.ttft_speedup} for r in reports.values()],
            "goals": goals,
            "raw_decode_tok_s": ceiling,
        }
        print(json.dumps(doc, indent=2))
    else:
        if reports:
            _print_table(list(reports.values()))
        print(json.dumps({"goals": goals, "settings": settings, "raw_decode_tok_s": ceiling}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

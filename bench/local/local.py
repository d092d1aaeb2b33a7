"""hasten's local engine against the best and the baseline: same GGUF, same threads.

Servers, each in turn (never two at once, they would share the cores), in alternating
rounds: ``gateway`` is ``hasten serve`` with llama-server as its supervised child (what
users run; cache off so every request reaches the engine), ``llama_server`` is llama.cpp's
own server alone with the same settings (``hasten local``: the ceiling), ``llama_cpp`` is
llama-cpp-python's bundled ``llama_cpp.server`` (the weak baseline). Measures aggregate
decode tok/s at 1, 2, 4, 8 concurrent streams; the spread of first tokens at 8 streams;
TTFT with a shared ~300-token system prompt, warm vs cold; streams cut off before their
finish_reason; peak RSS; the gateway's own CPU per token. Then ``gateway`` and
``llama_server`` both up and asked in turn (the fairest A/B of the hop on a shared box),
and n-gram speculative decoding on and off on a workload that repeats its input and one
that does not.

    .venv/bin/python bench/local/local.py --quick          # a few minutes
    .venv/bin/python bench/local/local.py --json > out.json

llama-server is the one ``make`` built (scripts/llama_server.py). The baseline installs
itself on first use into bench/.venvs/llama-server: the portable engine wheel
(scripts/engine_wheel.py) plus llama-cpp-python's ``server`` extra.
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

from hasten.config.local import EngineConfig, default_model_path  # noqa: E402
from hasten.local.command import find_binary  # noqa: E402

STREAM_LEVELS = (1, 2, 4, 8)
SYSTEM_SENTENCE = "You are the support assistant of a hardware store that sells tools and paint. "
TOPICS = ("a lighthouse", "a robot", "the sea", "a forest", "a city", "a dragon", "a cat", "rain")


@dataclass
class StreamResult:
    num_tokens: int = 0
    ttft_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    num_reconnects: int = 0  # kept-alive connections closed unanswered, then retried

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
    num_reconnects: int = 0
    peak_rss_mb: float = 0.0
    # At 8 streams: the last stream's first token minus the first one's.
    first_token_spread_ms: float = 0.0
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
SERVER_NAMES = ("gateway", "llama_server", "llama_cpp")


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
    ]


def _gateway_config(
    model: Path, num_threads: int, n_ctx: int, extra: dict[str, int] | None = None
) -> Path:
    path = ROOT / "bench" / "results" / f"local-gateway-{os.getpid()}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{key} = {value}\n" for key, value in (extra or {}).items())
    path.write_text(
        f'[local]\nmodel_path = "{model}"\nn_threads = {num_threads}\nn_ctx = {n_ctx}\n'
        "max_seqs = 8\n" + lines
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
    if name == "llama_server":
        # `hasten local` execs llama-server with exactly the flags the gateway gives it.
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
        for attempt in range(2):
            try:
                await _read_stream(client, body, result, started_s)
                break
            except httpx.RemoteProtocolError:
                # llama-server closed a kept-alive connection without answering: nothing
                # came back, so once more on a fresh one (as the gateway's transport does).
                if attempt or result.num_tokens or result.finish_reason:
                    raise
                result.num_reconnects += 1
    except httpx.HTTPError as exc:
        result.error = repr(exc)
    return result


async def _read_stream(
    client: httpx.AsyncClient, body: dict[str, Any], result: StreamResult, started_s: float
) -> None:
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            result.error = f"HTTP {response.status_code}"
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                result.num_tokens += 1
                if result.ttft_s is None:
                    result.ttft_s = time.perf_counter() - started_s
            result.finish_reason = choices[0].get("finish_reason") or result.finish_reason


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
    report.num_reconnects += sum(r.num_reconnects for r in results)
    firsts = [r.ttft_s for r in results if r.ttft_s is not None]
    if num_streams == max(STREAM_LEVELS) and firsts:
        report.first_token_spread_ms = (max(firsts) - min(firsts)) * 1000.0


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
    """The gateway and llama-server alone, both up at once and asked in turn.

    An idle engine takes no CPU, so the one being asked has the cores to itself, and any
    drift in the machine's load hits both alike: a fairer A/B of the gateway's hop than
    phases minutes apart. Per rep: a warm TTFT; then (after all of those) a cold TTFT and
    aggregate tok/s at 1, 2, 4 and 8 concurrent 48-token streams.
    """
    servers = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with contextlib.ExitStack() as stack:
        try:
            for name in ("llama_server", "gateway"):
                port = _free_port()
                command = _server_command(name, args.model, port, args.threads, args.n_ctx)
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
    direct, gateway = medians["llama_server"], medians["gateway"]
    # tok/s: gateway / alone; TTFT: alone / gateway; 1.0 is parity either way.
    ratios = {
        figure: (gateway[figure] / direct[figure])
        if figure.startswith("tok_s")
        else (direct[figure] / gateway[figure])
        for figure in direct
    }
    return {
        "num_reps": num_reps,
        "medians": medians,
        "gateway_vs_llama_server": ratios,
        "throughput_within_5pct": all(
            value >= 0.95 for figure, value in ratios.items() if figure.startswith("tok_s")
        ),
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
    merged.num_reconnects = sum(r.num_reconnects for r in reports)
    merged.peak_rss_mb = max(r.peak_rss_mb for r in reports)
    merged.first_token_spread_ms = statistics.median(r.first_token_spread_ms for r in reports)
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
        + f"{'spread@8':>10}"
    )
    for r in reports:
        print(
            f"{r.name:<10}"
            + "".join(f"{r.decode_tok_s[n]:>14.1f}" for n in STREAM_LEVELS)
            + f"{r.ttft_cold_ms:>9.0f}ms{r.ttft_warm_ms:>9.0f}ms{r.ttft_speedup:>8.1f}x"
            + f"{r.num_cut_off:>5}/{r.num_streams:<3}{r.peak_rss_mb:>9.0f}"
            + f"{r.first_token_spread_ms:>8.0f}ms"
        )


def _goals(reports: dict[str, ServerReport]) -> dict[str, Any]:
    goals: dict[str, Any] = {}
    ours = reports.get("gateway")
    if ours is not None:
        goals |= {
            "scaling_8_vs_1": ours.decode_tok_s[8] / ours.decode_tok_s[1],
            "warm_ttft_speedup": ours.ttft_speedup,
            "num_cut_off": sum(r.num_cut_off for r in reports.values()),
            "peak_rss_mb": ours.peak_rss_mb,
            "gateway_cpu_us_per_token": ours.cpu_us_per_token,
        }
    base = reports.get("llama_cpp")
    for name in ("gateway", "llama_server"):
        if base is not None and name in reports:
            goals[f"{name}_vs_llama_cpp"] = {
                n: reports[name].decode_tok_s[n] / base.decode_tok_s[n] for n in STREAM_LEVELS
            }
    alone = reports.get("llama_server")
    if alone is not None and ours is not None:
        # tok/s: gateway / alone; TTFT: alone / gateway: 1.0 is parity, > 0.95 the goal.
        ratios = {f"tok_s_{n}": ours.decode_tok_s[n] / alone.decode_tok_s[n] for n in STREAM_LEVELS}
        ratios["ttft_cold"] = alone.ttft_cold_ms / ours.ttft_cold_ms
        ratios["ttft_warm"] = alone.ttft_warm_ms / ours.ttft_warm_ms
        goals["gateway_vs_llama_server"] = ratios
        goals["throughput_within_5pct"] = all(
            value >= 0.95 for figure, value in ratios.items() if figure.startswith("tok_s")
        )
    return goals


REWRITE_PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling in the salt "
    "wind. Every evening the keeper climbed the narrow stairs, lit the great lamp and watched "
    "the ships pass far below, their lights moving slowly across the dark water until dawn."
)
SPEC_WORKLOADS = {
    # The answer repeats the prompt: drafted n-grams are found and accepted.
    "repeating": f"Rewrite this paragraph with the word 'old' changed to 'tall', and "
    f"nothing else changed:\n\n{REWRITE_PARAGRAPH}",
    # A fresh story: hardly any n-gram of the prompt recurs, drafts are mostly wasted.
    "non_repeating": "Write a long story about a dragon who learns to cook.",
}


async def _spec_tok_s(base_url: str, prompt: str, max_tokens: int, num_streams: int) -> float:
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        body = {
            "model": "local",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": False,
        }

        async def post() -> httpx.Response:
            try:
                return await client.post("/v1/chat/completions", json=body)
            except httpx.RemoteProtocolError:  # closed unanswered: see _stream
                return await client.post("/v1/chat/completions", json=body)

        started_s = time.perf_counter()
        replies = await asyncio.gather(*(post() for _ in range(num_streams)))
        elapsed_s = time.perf_counter() - started_s
        tokens = sum(reply.json()["usage"]["completion_tokens"] for reply in replies)
        return tokens / elapsed_s


def speculative(args: argparse.Namespace) -> dict[str, Any]:
    """llama-server alone, n-gram speculation off and on (``spec_ngram_max``), both up and
    asked in turn: decode tok/s on each workload at 1 and 4 streams (greedy)."""
    variants = {"off": {}, "on": {"spec_ngram_max": args.spec_ngram_max}}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    samples: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        procs, urls = [], {}
        try:
            for variant, extra in variants.items():
                port = _free_port()
                command = _server_command(
                    "llama_server", args.model, port, args.threads, args.n_ctx, extra
                )
                stderr = stack.enter_context(tempfile.TemporaryFile())
                proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
                procs.append(proc)
                urls[variant] = f"http://127.0.0.1:{port}"
                _wait_ready(urls[variant], proc, stderr)
            for rep in range(args.reps):
                for workload, prompt in SPEC_WORKLOADS.items():
                    for num_streams in (1, 4):
                        order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
                        for variant in order:
                            tok_s = asyncio.run(
                                _spec_tok_s(urls[variant], prompt, args.max_tokens, num_streams)
                            )
                            key = f"{workload}_{num_streams}_{variant}"
                            samples.setdefault(key, []).append(tok_s)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    gains = {
        f"{workload}_{n}": medians[f"{workload}_{n}_on"] / medians[f"{workload}_{n}_off"]
        for workload in SPEC_WORKLOADS
        for n in (1, 4)
    }
    spreads = {
        key: (min(values), max(values)) for key, values in samples.items()
    }  # the noise: each figure's range over the reps
    return {
        "spec_ngram_max": args.spec_ngram_max,
        "reps": args.reps,
        "tok_s_medians": medians,
        "tok_s_ranges": spreads,
        "on_vs_off": gains,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short streams, fewer repetitions")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--threads", type=int, default=EngineConfig().resolved().n_threads, help="hasten's default"
    )
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
        "--spec-ngram-max", type=int, default=16, help="drafted tokens when speculation is on"
    )
    parser.add_argument("--no-spec", action="store_true", help="skip the speculation A/B")
    args = parser.parse_args(argv)
    args.model = args.model or default_model_path()
    args.max_tokens = 48 if args.quick else 128
    args.reps = 3 if args.quick else 5
    load_before = os.getloadavg()
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
    is_ab = args.interleaved_reps > 0 and {"llama_server", "gateway"} <= set(names)
    if is_ab:
        goals["interleaved"] = interleaved(args, args.interleaved_reps)
    spec = None if args.no_spec or args.no_servers else speculative(args)
    settings = {
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "model": str(args.model),
        "llama_server": str(find_binary().resolve()),
        # Other jobs on the machine change every figure here: recorded with them.
        "load_avg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        doc = {
            "settings": settings,
            "servers": [asdict(r) | {"ttft_speedup": r.ttft_speedup} for r in reports.values()],
            "goals": goals,
            "speculative": spec,
        }
        print(json.dumps(doc, indent=2))
    else:
        if reports:
            _print_table(list(reports.values()))
        print(json.dumps({"goals": goals, "settings": settings, "speculative": spec}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

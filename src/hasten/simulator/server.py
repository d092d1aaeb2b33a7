"""Command line of `hasten simulate`: flags, config loading and serving under uvicorn."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from typing import Any

import uvicorn

from hasten.errors import ConfigError
from hasten.simulator.app import SimulatorApp
from hasten.simulator.config import SimConfig, load_toml_config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
# The message uvicorn logs when we abort a response on purpose (an injected disconnect).
INJECTED_ABORT_MESSAGE = "ASGI callable returned without completing response."

# flag -> (SimConfig field, type, help)
_LATENCY_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--rtt-ms", "rtt_ms", float, "network round trip (before the first token, /models, errors)"),
    ("--ttft-ms", "ttft_base_ms", float, "base time to first token"),
    ("--prefill-ms", "prefill_ms_per_token", float, "prefill cost per uncached prompt token"),
    (
        "--prefill-cached-ms",
        "prefill_cached_ms_per_token",
        float,
        "prefill cost per prompt token found in the prefix cache",
    ),
    ("--decode-ms", "decode_ms_per_token", float, "delay between output tokens"),
    ("--jitter-sigma", "jitter_sigma", float, "sigma of the log-normal latency jitter"),
    ("--straggler-prob", "straggler_prob", float, "probability a request is a straggler"),
    ("--straggler-mult", "straggler_mult", float, "latency multiplier for stragglers"),
    ("--error-rate", "error_rate", float, "share of requests answered with a 500"),
    ("--rate-limit-rate", "rate_limit_rate", float, "share of requests answered with a 429"),
    ("--disconnect-rate", "disconnect_rate", float, "share of responses aborted midway"),
    ("--silent-rate", "silent_rate", float, "share of requests read and never answered"),
    ("--hang-rate", "hang_rate", float, "share answered 200 and headers, then nothing"),
    ("--malformed-rate", "malformed_rate", float, "share with an event that is not JSON"),
    ("--truncate-rate", "truncate_rate", float, "share whose body ends cut mid-event/JSON"),
    ("--retry-after-s", "retry_after_s", float, "Retry-After seconds of injected 429s"),
    ("--output-tokens", "output_tokens", int, "completion length when max_tokens is absent"),
    ("--prefix-cache-blocks", "prefix_cache_blocks", int, "prefix cache capacity in blocks"),
    ("--seed", "seed", int, "seed of the latency and fault RNG"),
    ("--max-tool-calls", "max_tool_calls", int, "tool calls one answer makes at most (0: none)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind")
    parser.add_argument(
        "--config", default=None, help="TOML file whose [simulator] table sets SimConfig fields"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        help='model name to serve (repeatable or comma-separated; default "sim-model")',
    )
    for flag, field, kind, help_text in _LATENCY_FLAGS:
        # Default None: only flags actually given override the TOML file.
        parser.add_argument(flag, dest=f"sim_{field}", type=kind, default=None, help=help_text)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Defaults, then the TOML file, then explicit flags."""
    base = load_toml_config(args.config) if args.config else SimConfig()
    changes: dict[str, Any] = {}
    for _, field, _, _ in _LATENCY_FLAGS:
        value = getattr(args, f"sim_{field}", None)
        if value is not None:
            changes[field] = value
    if args.model:
        changes["models"] = ",".join(args.model)
    return base.updated(changes)


class _DropInjectedAborts(logging.Filter):
    """Hides uvicorn's error line for disconnects we inject on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != INJECTED_ABORT_MESSAGE


def _banner(config: SimConfig, host: str, port: int) -> str:
    return (
        f"hasten simulate: serving {', '.join(config.models)} on http://{host}:{port}/v1 "
        f"(rtt {config.rtt_ms:g} ms, ttft {config.ttft_base_ms:g} ms, "
        f"prefill {config.prefill_ms_per_token:g} ms/token, "
        f"decode {config.decode_ms_per_token:g} ms/token, jitter {config.jitter_sigma:g}, "
        f"errors {config.error_rate:g}/429 {config.rate_limit_rate:g}/"
        f"disconnect {config.disconnect_rate:g}, seed {config.seed})"
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"hasten simulate: {exc}", file=sys.stderr)
        return 2
    app = SimulatorApp(config)
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    print(_banner(config, args.host, args.port), flush=True)
    logging.getLogger("uvicorn.error").addFilter(_DropInjectedAborts())
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        http="httptools",
        loop=loop,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    return 0

"""The ``hasten`` command: serve, simulate, bench, local, doctor, check-config."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from hasten import __version__
from hasten.config import GatewayConfig, ModelRoute, load_config, redact_url
from hasten.config.keys_table import describe_keys
from hasten.config.metrics import describe_metrics
from hasten.errors import ConfigError

DESCRIPTION = """\
hasten makes LLM applications answer faster: point your OpenAI SDK's base_url at it.

commands:
  serve         run the OpenAI-compatible gateway (streaming proxy, tiered exact cache,
                request coalescing, retries and fallbacks). With no upstream configured it
                fronts a built-in latency simulator, labelled as such at startup.
  simulate      run the latency simulator: an OpenAI-compatible server producing
                deterministic text with configurable TTFT, decode speed, jitter,
                stragglers, errors, 429s and disconnects; the upstream for tests/benchmarks.
  bench         load generator: drive any OpenAI-compatible URL and report TTFT,
                end-to-end and inter-token latency percentiles, throughput and hit ratio.
  local         serve the bundled local model (SmolLM2-135M on llama.cpp, continuous
                batching, prefix reuse) as an OpenAI-compatible server on its own.
  doctor        probe any OpenAI-compatible URL with a few bounded requests and explain
                where the time goes (DNS, connect, TLS, RTT, TTFT, time per token,
                streaming, prompt caching) and what each hasten lever would save.
  check-config  validate a config file and print what it declares.
"""


def _check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file, os.environ)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(_describe(args.file, config))
    return 0


def _describe_resume(config: GatewayConfig, route: ModelRoute) -> str:
    """What a broken stream of ``route`` can be continued with."""
    names = (route.upstream, *route.fallbacks)
    prefill = [n for n in names if config.upstreams[n].prefill != "none"]
    again = "another deployment" if len(names) > 1 else "the same deployment again"
    how = (
        f"prefill via {', '.join(prefill)}" if prefill else "no prefill (no upstream declares one)"
    )
    return f"deterministic requests regenerated on {again}; otherwise {how}"


def _describe(path: str, config: GatewayConfig) -> str:
    lines = [f"{path}: OK"]
    for upstream in config.upstreams.values():
        key = "key set" if upstream.api_key else "no key"
        lines.append(
            f"  upstream {upstream.name}: {redact_url(upstream.url)} ({key}; retries "
            f"{upstream.retry.max_retries}; timeouts connect "
            f"{upstream.timeouts.connect_s:g}s, first byte "
            f"{upstream.timeouts.first_byte_s:g}s, idle {upstream.timeouts.idle_s:g}s, "
            f"total {upstream.timeouts.total_s:g}s; non-stream requests asked "
            f"{'as streams' if upstream.is_stream_upstream else 'whole'}"
            f"{'' if upstream.prefill == 'none' else '; prefill ' + upstream.prefill})"
        )
    for route in config.models.values():
        chain = " -> ".join((route.upstream, *route.fallbacks))
        lines.append(f"  model {route.name}: {chain}")
        if route.is_resuming_streams:
            lines.append(f"    resume streams: {_describe_resume(config, route)}")
        if route.policy is not None:
            lines.append(f"    policy: {route.policy.describe()}")
        hedge = route.routing.hedge
        if hedge.is_enabled:
            budget = (
                f"a bucket of {hedge.budget_burst:g} hedges; since the start at most the "
                f"larger of {hedge.budget_burst:g} and {100 * hedge.budget:g}% of requests"
                if hedge.budget_burst > 0
                else f"over {hedge.budget_window_s:g}s"
            )
            gap = (
                "as long" if hedge.second_quantile is None else f"p{100 * hedge.second_quantile:g}"
            )
            second = f", then a second {gap} later"
            lines.append(
                f"    hedging: up to {hedge.max_hedges}, the first at a pooled TTFT quantile "
                f"(>= p{100 * hedge.quantile:g}, {hedge.min_delay_ms:g}-{hedge.max_delay_ms:g} ms)"
                f"{second if hedge.max_hedges > 1 else ''}; budget {100 * hedge.budget:g}% "
                f"({budget})"
            )
    for alias, target in config.aliases.items():
        lines.append(f"  alias {alias} = {target}")
    if config.server.num_workers > 1:
        lines.append(f"  workers: {config.server.num_workers} gateway processes on one port")
    for tenant, policy in config.tenant_policies.items():
        lines.append(f"  tenant {tenant} policy: {policy.describe()}")
    if config.keys.is_enabled:
        lines.append("  " + describe_keys(config.keys))
    for model, price in config.prices.items():
        lines.append(
            f"  price {model}: ${price.input_usd_per_1m_tokens:g} in, "
            f"${price.output_usd_per_1m_tokens:g} out per 1M tokens"
        )
    cache = config.cache
    lines.append(
        f"  cache: {'on' if cache.is_enabled else 'off'}, backend {cache.backend}, "
        f"ttl {cache.ttl_s:g}s, deterministic only: {cache.is_deterministic_only}"
    )
    semantic = config.semantic
    if semantic.is_enabled:
        if semantic.min_similarity is not None:
            decision = f"min similarity {semantic.min_similarity:g} (cosine override)"
        else:
            decision = f"target precision {semantic.target_precision:g} (calibrated)"
        lines.append(
            f"  semantic cache: on, embedder {semantic.embedder}, {decision}, file {semantic.path}"
        )
    if config.local is not None:
        engine = config.local.engine
        model_path = engine.model_path or "the packaged default model"
        lines.append(f"  local engine: {model_path}, context {engine.n_ctx} tokens")
    if config.hybrid is not None:
        hybrid = config.hybrid
        lines.append(
            f"  hybrid model {hybrid.model}: {hybrid.policy}, cloud model "
            f"{hybrid.cloud_model or '(none)'}"
        )
    telemetry = config.telemetry
    if telemetry.otlp_endpoint is not None:
        # Header names only: their values are usually a collector's API key.
        headers = f", headers {', '.join(sorted(telemetry.headers))}" if telemetry.headers else ""
        lines.append(
            f"  tracing: OTLP/HTTP to {redact_url(telemetry.otlp_endpoint)}, service "
            f"{telemetry.service_name}, sample ratio {telemetry.sample_ratio:g}{headers}"
        )
    lines.append("  " + describe_metrics(config.metrics))
    if not config.upstreams:
        lines.append("  no upstreams: `hasten serve` will front the built-in simulator")
    return "\n".join(lines)


# Each command's module is imported only when that command runs: `hasten local` pulls in
# llama.cpp, which `serve` must not pay for.
_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("hasten.server.run", "run the gateway"),
    "simulate": ("hasten.simulator.server", "run the latency simulator"),
    "bench": ("hasten.loadgen.cli", "run the load generator"),
    "local": ("hasten.local.server", "serve the local llama.cpp model on its own"),
    "doctor": ("hasten.doctor.cli", "explain where an endpoint's time goes"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hasten", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"hasten {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in _COMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(func=module.run)
    check = commands.add_parser("check-config", help="validate a config file")
    check.add_argument("file", help="TOML config file")
    check.set_defaults(func=_check_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``hasten bench``: argument definitions and the command body (wired up in hasten.cli)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from hasten.loadgen.progress import progress_for
from hasten.loadgen.report import LoadReport, format_text
from hasten.loadgen.runner import run_load
from hasten.loadgen.settings import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    DEFAULT_NUM_REQUESTS,
    LoadSettings,
)
from hasten.loadgen.workload import WorkloadSpec, load_prompts

API_KEY_ENV = "OPENAI_API_KEY"

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target")
    target.add_argument(
        "--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible base URL (%(default)s)"
    )
    target.add_argument("--model", default=DEFAULT_MODEL, help="(default: %(default)s)")
    target.add_argument("--api-key", help=f"bearer key (default: ${API_KEY_ENV})")
    target.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    target.add_argument("--stream", action=argparse.BooleanOptionalAction, default=False)
    target.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="extra header"
    )
    target.add_argument("--timeout-s", type=float, default=60.0, help="per request (%(default)s)")

    workload = parser.add_argument_group("workload")
    workload.add_argument("--prompts", type=Path, help="JSONL (prompt/messages) or text lines")
    workload.add_argument("--num-unique", type=int, help="distinct prompts to draw from")
    order = workload.add_mutually_exclusive_group()
    order.add_argument("--repeat-ratio", type=float, help="fraction repeating an earlier prompt")
    order.add_argument("--zipf", type=float, metavar="S", help="Zipf popularity exponent")
    workload.add_argument("--prompt-words", type=int, default=32, help="synthetic prompt length")
    workload.add_argument(
        "--temperature", type=float, default=0.0, help="%(default)s lets the cache apply"
    )
    workload.add_argument("--max-tokens", type=int)
    workload.add_argument("--seed", type=int, default=0)

    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", type=int, help="closed-loop clients (open loop: cap)")
    load.add_argument("--rate", type=float, metavar="RPS", help="open loop: requests per second")
    load.add_argument("--arrival", choices=("poisson", "fixed"), default="poisson")
    load.add_argument("--num-requests", type=int, help=f"default {DEFAULT_NUM_REQUESTS}")
    load.add_argument("--duration-s", type=float, help="stop starting requests after this")
    load.add_argument("--warmup", type=int, default=0, help="requests excluded from figures")

    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the report as JSON")
    output.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def settings_from_args(args: argparse.Namespace) -> LoadSettings:
    """Raises ValueError (or OSError for the prompts file) on unusable arguments."""
    prompts = load_prompts(args.prompts) if args.prompts is not None else None
    num_requests = args.num_requests
    if num_requests is None and args.duration_s is None:
        num_requests = DEFAULT_NUM_REQUESTS
    return LoadSettings(
        base_url=args.base_url,
        model=args.model,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        endpoint=args.endpoint,
        stream=args.stream,
        workload=WorkloadSpec(
            prompts=prompts,
            num_unique=args.num_unique,
            repeat_ratio=args.repeat_ratio,
            zipf_s=args.zipf,
            seed=args.seed,
            prompt_num_words=args.prompt_words,
        ),
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        headers=parse_headers(args.header),
        concurrency=args.concurrency,
        rate_rps=args.rate,
        arrival=args.arrival,
        num_requests=num_requests,
        duration_s=args.duration_s,
        num_warmup=args.warmup,
        timeout_s=args.timeout_s,
        seed=args.seed,
    )


def parse_headers(raw_headers: Sequence[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in raw_headers:
        name, separator, value = raw.partition(":")
        if not separator or not name.strip():
            raise ValueError(f"header {raw!r} is not NAME:VALUE")
        headers[name.strip()] = value.strip()
    return headers


def run(args: argparse.Namespace) -> int:
    """0 when at least one measured request succeeded, 1 when none did, 2 on bad arguments."""
    try:
        settings = settings_from_args(args)
    except (ValueError, OSError) as exc:
        print(f"hasten bench: {exc}", file=sys.stderr)
        return 2
    progress = progress_for(enabled=not args.no_progress)
    report = run_coroutine(run_load(settings, progress=progress))
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(format_text(report))
    return exit_code(report)


def exit_code(report: LoadReport) -> int:
    return 1 if report.num_requests and not report.num_ok else 0


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs on uvloop when it is installed: a cheaper loop leaves more CPU for the target."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m hasten.loadgen``) until ``hasten bench`` is wired."""
    parser = argparse.ArgumentParser(prog="hasten bench", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))

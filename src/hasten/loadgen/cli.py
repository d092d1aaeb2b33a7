"""``hasten bench``: argument definitions and the command body (wired up in hasten.cli)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from hasten.errors import ReportDependencyMissing
from hasten.loadgen.compare import (
    COMPARE_LABEL,
    PRIMARY_LABEL,
    ComparisonRow,
    compare_reports,
    format_comparison,
)
from hasten.loadgen.compat import parse_percentiles
from hasten.loadgen.progress import progress_for
from hasten.loadgen.provenance import public_url, run_context
from hasten.loadgen.report import LoadReport, format_text
from hasten.loadgen.runner import run_load
from hasten.loadgen.settings import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    DEFAULT_NUM_REQUESTS,
    LoadSettings,
)
from hasten.loadgen.slo import parse_goodput
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
    target.add_argument(
        "--compare-url",
        metavar="URL",
        help="also run the same workload (same seed) against this base URL, e.g. the "
        "upstream directly, before the --base-url run; reports show both",
    )
    target.add_argument("--compare-api-key", help="bearer key for --compare-url (default: same)")
    target.add_argument("--label", default=PRIMARY_LABEL, help="name of --base-url in reports")
    target.add_argument(
        "--compare-label", default=COMPARE_LABEL, help="name of --compare-url in reports"
    )

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
    output.add_argument("--result-json", type=Path, metavar="FILE", help="write the JSON here")
    output.add_argument(
        "--report", type=Path, metavar="FILE", help="self-contained HTML report with charts"
    )
    output.add_argument(
        "--png", type=Path, metavar="FILE", help="the report's charts as one PNG (matplotlib)"
    )
    output.add_argument(
        "--percentiles",
        default="99",
        metavar="P,P",
        help="vLLM-style p{P}_*_ms fields, like its --metric-percentiles (%(default)s)",
    )
    output.add_argument(
        "--goodput",
        nargs="+",
        default=[],
        metavar="KEY:MS",
        help="SLOs for request_goodput, vLLM's syntax: ttft:500 tpot:50 e2el:2000",
    )


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
        keep_samples=args.report is not None or args.png is not None,
        percentiles=parse_percentiles(args.percentiles),
        goodput_ms=parse_goodput(args.goodput),
    )


def compare_settings_from(args: argparse.Namespace, settings: LoadSettings) -> LoadSettings | None:
    """The --compare-url run: everything as the primary run but the URL (and maybe key)."""
    if args.compare_url is None:
        return None
    if args.label == args.compare_label:
        raise ValueError("--label and --compare-label must differ")
    api_key = args.compare_api_key or settings.api_key
    return replace(settings, base_url=args.compare_url, api_key=api_key)


def parse_headers(raw_headers: Sequence[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in raw_headers:
        name, separator, value = raw.partition(":")
        if not separator or not name.strip():
            raise ValueError(f"header {raw!r} is not NAME:VALUE")
        headers[name.strip()] = value.strip()
    return headers


def run(args: argparse.Namespace) -> int:
    """0 when at least one measured request succeeded in every run, 1 when a run had none
    succeed, 2 on bad arguments."""
    try:
        settings = settings_from_args(args)
        compare_settings = compare_settings_from(args, settings)
        if args.png is not None:
            from hasten.loadgen.png_report import require_matplotlib

            require_matplotlib()
    except (ValueError, OSError, ReportDependencyMissing) as exc:
        print(f"hasten bench: {exc}", file=sys.stderr)
        return 2
    planned: list[tuple[str, LoadSettings]] = [(args.label, settings)]
    if compare_settings is not None:
        planned.append((args.compare_label, compare_settings))
    runs = run_coroutine(_run_all(planned, is_progress=not args.no_progress))
    comparison = compare_reports(runs[0][1], runs[1][1]) if len(runs) == 2 else []
    _write_outputs(args, runs, comparison)
    return max(exit_code(report) for _, report in runs)


async def _run_all(
    planned: Sequence[tuple[str, LoadSettings]], *, is_progress: bool
) -> list[tuple[str, LoadReport]]:
    """The compare run goes first: the primary target's cache starts cold either way."""
    reports: dict[str, LoadReport] = {}
    for label, settings in reversed(planned):
        progress = progress_for(enabled=is_progress)
        if progress is not None and len(planned) > 1:
            print(f"{label}: {public_url(settings.base_url)}", file=sys.stderr)
        reports[label] = await run_load(settings, progress=progress)
    return [(label, reports[label]) for label, _ in planned]


def result_document(
    args: argparse.Namespace,
    runs: Sequence[tuple[str, LoadReport]],
    comparison: Sequence[ComparisonRow],
) -> dict[str, Any]:
    """One run: its report, as before. Two: both reports by label plus the ratio rows."""
    context = run_context(vars(args))
    if len(runs) == 1:
        return {**runs[0][1].to_dict(), "context": context}
    return {
        "runs": {label: report.to_dict() for label, report in runs},
        "comparison": [row.to_dict() for row in comparison],
        "context": context,
    }


def _write_outputs(
    args: argparse.Namespace,
    runs: Sequence[tuple[str, LoadReport]],
    comparison: Sequence[ComparisonRow],
) -> None:
    document = result_document(args, runs, comparison)
    encoded = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    if args.result_json is not None:
        args.result_json.write_bytes(encoded + b"\n")
    if args.report is not None:
        from hasten.loadgen.html_report import render_html, write_html

        write_html(args.report, render_html(runs, document["context"], comparison))
    if args.png is not None:
        from hasten.loadgen.png_report import write_png

        write_png(args.png, runs)
    if args.json:
        sys.stdout.write(encoded.decode() + "\n")
        return
    for label, report in runs:
        if len(runs) > 1:
            print(f"== {label}")
        print(format_text(report))
    if comparison:
        print(f"== {runs[0][0]} vs {runs[1][0]}")
        print(format_comparison(list(comparison), runs[0][0], runs[1][0]))


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

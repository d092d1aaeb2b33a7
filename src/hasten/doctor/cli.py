"""``hasten doctor``: argument definitions and the command body (wired up in hasten.cli)."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from hasten.doctor.analysis import diagnose
from hasten.doctor.probe import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_NUM_TRIES,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    DoctorSettings,
    probe,
)
from hasten.doctor.report import format_text, to_dict
from hasten.errors import DoctorError
from hasten.loadgen.cli import run_coroutine

DEFAULT_KEY_ENV = "OPENAI_API_KEY"

DESCRIPTION = """\
Probe an OpenAI-compatible endpoint with a few short, bounded requests and explain where
the time goes: DNS, TCP connect, TLS, round trip, server time to first token, time per
token, the spread across tries, whether it streams, whether a repeated prompt is served
faster (prompt caching), and what each hasten lever would save on it.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("url", help="base URL, as the OpenAI SDK's base_url (e.g. .../v1)")
    parser.add_argument("--model", help="model to probe (default: the first of GET /models)")
    parser.add_argument(
        "--key-env",
        metavar="VAR",
        help=f"environment variable holding the API key (default: ${DEFAULT_KEY_ENV} if set)",
    )
    parser.add_argument(
        "--tries", type=int, default=DEFAULT_NUM_TRIES, help="timed tries per probe (%(default)s)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="per probe (%(default)s)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="whole run (%(default)s)"
    )
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="per request (%(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def settings_from_args(args: argparse.Namespace) -> DoctorSettings:
    """Raises ValueError on unusable arguments (an unset --key-env variable included)."""
    key_env = args.key_env
    if key_env is not None and key_env not in os.environ:
        raise ValueError(f"--key-env {key_env}: that environment variable is not set")
    if key_env is None and os.environ.get(DEFAULT_KEY_ENV):
        key_env = DEFAULT_KEY_ENV
    return DoctorSettings(
        base_url=args.url,
        model=args.model,
        api_key=os.environ.get(key_env) if key_env else None,
        key_env=key_env,
        num_tries=args.tries,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout_s,
        request_timeout_s=args.request_timeout_s,
    )


def run(args: argparse.Namespace) -> int:
    """0 with a report, 1 when the endpoint could not be probed, 2 on bad arguments."""
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"hasten doctor: {exc}", file=sys.stderr)
        return 2
    try:
        timings = run_coroutine(probe(settings))
    except DoctorError as exc:
        print(f"hasten doctor: {exc}", file=sys.stderr)
        return 1
    diagnosis = diagnose(timings)
    if args.json:
        sys.stdout.write(orjson.dumps(to_dict(diagnosis), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(format_text(diagnosis))
    return 0

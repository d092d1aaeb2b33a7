"""``hasten local``: llama.cpp's own server, alone, with hasten's ``[local]`` settings.

Precedence: command-line flags > the ``[local]`` table of ``--config`` > defaults. Every
``EngineConfig`` field has a flag of the same name (``max_seqs`` is ``--max-seqs``). The
process becomes ``llama-server`` (exec): what ``hasten serve`` supervises, without the
gateway in front.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields, replace
from pathlib import Path

from hasten.config.local import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    EngineConfig,
    LocalServerConfig,
    load_local_config,
)
from hasten.errors import ConfigError, EngineNotBuilt, ModelFileNotFound
from hasten.local.command import CHILD_ENV, server_command

_FLAG_HELP = {
    "model_path": "GGUF file (default: the bundled SmolLM2-135M)",
    "n_ctx": "KV cache tokens, all sequences",
    "n_threads": "CPU threads (default: one per core but one, at least 1)",
    "max_seqs": "requests decoded together",
    "cache_ram_mib": "RAM for finished prompts' KV, restored by prefix (0: off)",
    "spec_ngram_max": "n-gram speculative decoding: most drafted tokens (0: off)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help=f"bind address (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=None, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--config", default=None, help="TOML file with a [local] table")
    for item in fields(EngineConfig):
        parser.add_argument(
            f"--{item.name.replace('_', '-')}",
            dest=item.name,
            type=str if item.name == "model_path" else int,
            default=None,
            help=_FLAG_HELP.get(item.name, f"[local] {item.name}"),
        )


def resolve_config(args: argparse.Namespace) -> LocalServerConfig:
    config = load_local_config(args.config)
    overrides = {item.name: getattr(args, item.name) for item in fields(EngineConfig)}
    if overrides["model_path"] is not None:
        overrides["model_path"] = Path(overrides["model_path"])
    engine = replace(config.engine, **{k: v for k, v in overrides.items() if v is not None})
    return LocalServerConfig(
        host=args.host if args.host is not None else config.host,
        port=args.port if args.port is not None else config.port,
        engine=engine.check(),
        command=config.command,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)
        command = server_command(config.engine, config.host, config.port, config.command)
    except (ConfigError, ModelFileNotFound, EngineNotBuilt) as exc:
        print(f"hasten local: {exc}", file=sys.stderr)
        return 2
    engine = config.engine.resolved()
    print(
        f"hasten local: llama-server serving {Path(command[command.index('--model') + 1]).name}"
        f" as 'local' on http://{config.host}:{config.port}/v1 ({engine.n_threads} threads, "
        f"{engine.max_seqs} sequences, {engine.n_ctx} KV tokens)",
        flush=True,
    )
    os.execvpe(command[0], command, {**os.environ, **CHILD_ENV})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hasten local", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

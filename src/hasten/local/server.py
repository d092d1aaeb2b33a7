"""``hasten local``: serve the local engine as an OpenAI-compatible upstream with uvicorn.

Precedence: command-line flags > the ``[local]`` table of ``--config`` > defaults.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import uvicorn

from hasten.errors import ConfigError
from hasten.local.app import build_app
from hasten.local.config import DEFAULT_HOST, DEFAULT_PORT, LocalServerConfig, load_local_config
from hasten.local.engine import Engine
from hasten.local.model import ModelNotFound

_ENGINE_FLAGS = ("n_ctx", "n_threads", "max_seqs", "max_queue")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help=f"bind address (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=None, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--config", default=None, help="TOML file with a [local] table")
    parser.add_argument(
        "--model-path", default=None, help="GGUF file (default: the bundled SmolLM2-135M)"
    )
    parser.add_argument("--n-ctx", type=int, default=None, help="KV cache tokens, all sequences")
    parser.add_argument(
        "--n-threads",
        type=int,
        default=None,
        help="CPU threads for batches (default: one per core)",
    )
    parser.add_argument("--max-seqs", type=int, default=None, help="requests decoded together")
    parser.add_argument("--max-queue", type=int, default=None, help="waiting requests before 429")


def resolve_config(args: argparse.Namespace) -> LocalServerConfig:
    config = load_local_config(args.config)
    engine = config.engine
    overrides = {name: getattr(args, name) for name in _ENGINE_FLAGS}
    engine = replace(engine, **{k: v for k, v in overrides.items() if v is not None})
    if args.model_path is not None:
        engine = replace(engine, model_path=Path(args.model_path))
    return LocalServerConfig(
        host=args.host if args.host is not None else config.host,
        port=args.port if args.port is not None else config.port,
        engine=engine.check(),
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)
        engine = Engine(config.engine)
    except (ConfigError, ModelNotFound) as exc:
        print(f"hasten local: {exc}", file=sys.stderr)
        return 2
    with engine:
        server = uvicorn.Server(
            uvicorn.Config(
                build_app(engine), host=config.host, port=config.port, log_level="warning"
            )
        )
        print(
            f"hasten local: serving {engine.model.path.name} as 'local' on "
            f"http://{config.host}:{config.port}/v1 ({engine.config.n_threads} threads, "
            f"{engine.config.max_seqs} sequences, {engine.config.n_ctx} KV tokens)",
            flush=True,
        )
        server.run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hasten local", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

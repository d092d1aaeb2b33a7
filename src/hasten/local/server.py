"""``hasten local``: serve the local engine as an OpenAI-compatible upstream with uvicorn.

Precedence: command-line flags > the ``[local]`` table of ``--config`` > defaults. Every
``EngineConfig`` field has a flag of the same name (``max_seqs`` is ``--max-seqs``).
With ``--supervised`` it is the gateway's engine child (see ``supervisor``): it reports
on stdout, self-tests before it binds its port, and exits when its stdin closes (the
gateway is gone).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn

from hasten.config.local import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    EngineConfig,
    LocalServerConfig,
    load_local_config,
)
from hasten.errors import ConfigError, ModelFileNotFound
from hasten.local.sampling import SamplingParams
from hasten.local.supervisor import EVENT_PREFIX
from hasten.server.connection import bind

if TYPE_CHECKING:
    from hasten.local.engine import Engine

SELF_TEST_TIMEOUT_S = 60.0
_FLAG_HELP = {
    "model_path": "GGUF file (default: the bundled SmolLM2-135M)",
    "n_ctx": "KV cache tokens, all sequences",
    "n_threads": "CPU threads for batches (default: one per core)",
    "max_seqs": "requests decoded together",
    "max_queue": "waiting requests before 429",
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
    parser.add_argument(
        "--supervised",
        action="store_true",
        help="run as the gateway's engine child: events on stdout, self-test first, exit "
        "when stdin closes",
    )
    parser.add_argument(
        "--any-model",
        action="store_true",
        help="answer whatever model name a request carries (behind the gateway's routes)",
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
    )


def run(args: argparse.Namespace) -> int:
    # llama.cpp is loaded only here, so that importing this module (the CLI, the tests)
    # never maps native code into the process.
    from hasten.local.app import build_app
    from hasten.local.engine import Engine

    is_supervised = bool(args.supervised)
    try:
        config = resolve_config(args)
        if is_supervised:
            _report({"event": "system_info", "system_info": _system_info()})
        engine = Engine(config.engine)
    except (ConfigError, ModelFileNotFound) as exc:
        print(f"hasten local: {exc}", file=sys.stderr)
        return 2
    with engine:
        self_test_ms = _self_test(engine) if is_supervised else None
        sock = bind(config.host, config.port)
        # Listening before "ready" is reported: a connection made right after it waits in
        # the backlog for uvicorn's first accept instead of being refused.
        sock.listen(2048)
        server = uvicorn.Server(
            uvicorn.Config(
                build_app(engine, is_any_model=bool(args.any_model)),
                log_level="warning",
                lifespan="on",
            )
        )
        summary = (
            f"{engine.config.n_threads} threads, {engine.config.max_seqs} sequences, "
            f"{engine.config.n_ctx} KV tokens"
        )
        if is_supervised:
            threading.Thread(target=_exit_with_stdin, args=(server,), daemon=True).start()
            _report(
                {
                    "event": "ready",
                    "model": engine.model.path.name,
                    "n_threads": engine.config.n_threads,
                    "max_seqs": engine.config.max_seqs,
                    "n_ctx": engine.config.n_ctx,
                    "self_test_ms": self_test_ms,
                }
            )
        else:
            print(
                f"hasten local: serving {engine.model.path.name} as 'local' on "
                f"http://{config.host}:{config.port}/v1 ({summary})",
                flush=True,
            )
        server.run(sockets=[sock])
    return 0


def _report(event: dict[str, Any]) -> None:
    sys.stdout.buffer.write(EVENT_PREFIX + orjson.dumps(event) + b"\n")
    sys.stdout.buffer.flush()


def _system_info() -> str:
    import llama_cpp

    return str(llama_cpp.llama_print_system_info().decode(errors="replace")).strip()


def _self_test(engine: Engine) -> float:
    """One real token through the whole engine: a bad native kernel crashes here, before
    the port is open, not on a user's first request."""

    async def one_token() -> None:
        generation = engine.submit_chat(
            [{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=1, temperature=0.0)
        )
        async for event in generation:
            if event.error is not None:
                raise RuntimeError(f"self-test failed: {event.error}")

    started_s = time.perf_counter()
    asyncio.run(asyncio.wait_for(one_token(), SELF_TEST_TIMEOUT_S))
    return round((time.perf_counter() - started_s) * 1000.0, 1)


def _exit_with_stdin(server: uvicorn.Server) -> None:
    # The gateway holds the other end: EOF means it exited, however it died.
    while sys.stdin.buffer.read(4096):
        pass
    server.should_exit = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hasten local", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

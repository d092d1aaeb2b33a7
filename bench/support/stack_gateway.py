"""A hasten gateway with a chosen upstream client, for ``bench/overhead/stack.py``.

``STACK_UPSTREAM`` is the upstream base URL, ``STACK_CLIENT`` one of
``bench/support/stack_transports.py``'s names. ``build_app`` is the factory granian loads
(``granian --factory stack_gateway:build_app``); run as a script, it serves the same app
with uvicorn exactly as ``hasten serve`` does (httptools with hasten's connection limits,
uvloop): ``python bench/support/stack_gateway.py PORT``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench.support

import uvloop

from bench.support.stack_transports import transport_named
from hasten.app import HastenApp
from hasten.config import parse_config
from hasten.served import Overrides, served_config
from hasten.server.connection import bind, uvicorn_server


def build_app() -> Any:
    overrides = Overrides(
        upstream_url=os.environ["STACK_UPSTREAM"],
        cache_backend="memory",
        log_level="warning",
    )
    config = served_config(parse_config({}, {}), overrides)
    return HastenApp(config, transport=transport_named(os.environ.get("STACK_CLIENT", "aiohttp")))


def main() -> None:
    port = int(sys.argv[1])
    app = build_app()
    server = uvicorn_server(app, "warning", app.config.server)
    sock = bind("127.0.0.1", port)
    uvloop.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()

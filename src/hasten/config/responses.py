"""``[responses]``: where hasten keeps the OpenAI Responses API's stored responses.

A Responses request is stored unless it says ``store: false`` (OpenAI's default), so that a
follow-up naming it in ``previous_response_id`` continues the conversation and
``GET``/``DELETE /v1/responses/{id}`` find it (``hasten.responses``). Where the records
live follows the deployment unless ``backend`` says otherwise: the fleet's Redis with
``[fleet] redis_url`` (every replica finds every response), in this process's memory when
the cache is in memory and no ``path`` is set (tests, a quick ``hasten serve``), else the
SQLite file ``path`` (by default ``hasten-responses.sqlite3`` beside the cache's file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hasten.config.fleet import FleetConfig
from hasten.config.reader import TomlTable

RESPONSE_BACKENDS = ("memory", "sqlite", "redis")
DEFAULT_RESPONSES_PATH = "hasten-responses.sqlite3"
DEFAULT_RESPONSES_TTL_S = 30 * 24 * 3600.0  # OpenAI keeps a stored response 30 days
DEFAULT_MAX_RECORD_BYTES = 8 * 1024 * 1024  # one response with its input, stored
DEFAULT_RESPONSES_MAX_BYTES = 1024 * 1024 * 1024  # all of them; the oldest go first past it
# A ``previous_response_id`` chain is expanded at most this deep (one store read a hop).
DEFAULT_MAX_CHAIN_DEPTH = 1000


@dataclass(frozen=True, slots=True)
class ResponsesConfig:
    # None: follows the deployment (``backend_for``); else one of RESPONSE_BACKENDS.
    backend: str | None = None
    path: str | None = None  # the SQLite file; None: DEFAULT_RESPONSES_PATH
    ttl_s: float = DEFAULT_RESPONSES_TTL_S
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_bytes: int = DEFAULT_RESPONSES_MAX_BYTES
    max_chain_depth: int = DEFAULT_MAX_CHAIN_DEPTH

    def backend_for(self, cache_backend: str, fleet: FleetConfig) -> str:
        """The store the records live in, for this cache backend and fleet."""
        if self.backend is not None:
            return self.backend
        if fleet.is_enabled:
            return "redis"
        if cache_backend == "memory" and self.path is None:
            return "memory"
        return "sqlite"

    def sqlite_path_beside(self, cache_sqlite_path: str) -> str:
        """The SQLite file: ``path``, else DEFAULT_RESPONSES_PATH in the cache file's
        directory (one place for a gateway's files)."""
        if self.path is not None:
            return self.path
        return str(Path(cache_sqlite_path).with_name(DEFAULT_RESPONSES_PATH))


def parse_responses(table: TomlTable, fleet: FleetConfig) -> ResponsesConfig:
    d = ResponsesConfig()
    backend = table.optional_string("backend")
    if backend is not None and backend not in RESPONSE_BACKENDS:
        raise table.error(
            "backend", f"expected one of {', '.join(RESPONSE_BACKENDS)}, got {backend!r}"
        )
    if backend == "redis" and not fleet.is_enabled:
        raise table.error(
            "backend", "'redis' keeps responses in the fleet's Redis: set [fleet] redis_url"
        )
    config = ResponsesConfig(
        backend=backend,
        path=table.optional_string("path"),
        ttl_s=table.number("ttl_s", d.ttl_s),
        max_record_bytes=table.integer("max_record_bytes", d.max_record_bytes, minimum=1024),
        max_bytes=table.integer("max_bytes", d.max_bytes, minimum=1024),
        max_chain_depth=table.integer("max_chain_depth", d.max_chain_depth, minimum=1),
    )
    table.finish()
    if config.max_record_bytes > config.max_bytes:
        raise table.error("max_record_bytes", "must be <= max_bytes")
    return config

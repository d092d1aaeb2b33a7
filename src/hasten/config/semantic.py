"""``[semantic]``: settings of the semantic cache tier, parsed without loading any model."""

from __future__ import annotations

from dataclasses import dataclass

from hasten.config.reader import TomlTable

EMBEDDERS = ("e5", "minilm")
EVICTIONS = ("lru", "lfu")


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    """Off by default: each exact miss then pays one local embedding (about 10-40 ms)."""

    is_enabled: bool = False
    embedder: str = "e5"
    path: str = "hasten-semantic.sqlite3"
    min_similarity: float | None = None  # None: the embedder's measured default
    max_error_rate: float | None = None  # set (e.g. 0.01) for error-budget mode
    max_entries: int = 1_000_000
    eviction: str = "lru"
    default_ttl_s: float = 3600.0
    short_ttl_s: float = 300.0
    num_threads: int = 0  # 0: measured per batch (``E5Embedder``); n: always n


def parse_semantic(table: TomlTable) -> SemanticConfig:
    d = SemanticConfig()
    config = SemanticConfig(
        is_enabled=table.boolean("enabled", d.is_enabled),
        embedder=table.choice("embedder", d.embedder, EMBEDDERS),
        path=table.string("path", d.path),
        min_similarity=table.optional_real("min_similarity"),
        max_error_rate=table.optional_real("max_error_rate"),
        max_entries=int(table.get("max_entries", int, d.max_entries)),
        eviction=table.choice("eviction", d.eviction, EVICTIONS),
        default_ttl_s=table.real("default_ttl_s", d.default_ttl_s),
        short_ttl_s=table.real("short_ttl_s", d.short_ttl_s),
        num_threads=table.integer("num_threads", d.num_threads, minimum=0),
    )
    table.finish()
    if config.min_similarity is not None and not 0 < config.min_similarity < 1:
        raise table.error(
            "min_similarity", f"must be between 0 and 1, got {config.min_similarity:g}"
        )
    if config.max_error_rate is not None and not 0 < config.max_error_rate < 0.5:
        raise table.error(
            "max_error_rate", f"must be between 0 and 0.5, got {config.max_error_rate:g}"
        )
    return config

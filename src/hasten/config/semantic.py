"""``[semantic]``: settings of the semantic cache tier, parsed without loading any model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasten.errors import ConfigError

EMBEDDERS = ("e5", "minilm")
EVICTIONS = ("lru", "lfu")


@dataclass(frozen=True, slots=True)
class SemanticSettings:
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


_KINDS: dict[str, tuple[type, ...]] = {
    "enabled": (bool,),
    "embedder": (str,),
    "path": (str,),
    "min_similarity": (float, int),
    "max_error_rate": (float, int),
    "max_entries": (int,),
    "eviction": (str,),
    "default_ttl_s": (float, int),
    "short_ttl_s": (float, int),
    "num_threads": (int,),
}


def parse_semantic(table: Mapping[str, Any]) -> SemanticSettings:
    values: dict[str, Any] = {}
    for key, value in table.items():
        kinds = _KINDS.get(key)
        if kinds is None:
            raise ConfigError(f"semantic: unknown key {key!r} (known: {', '.join(_KINDS)})")
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ConfigError(f"semantic.{key}: expected {kinds[0].__name__}, got {value!r}")
        values["is_enabled" if key == "enabled" else key] = value
    settings = SemanticSettings(**values)
    if settings.embedder not in EMBEDDERS:
        raise ConfigError(f"semantic.embedder: expected one of {', '.join(EMBEDDERS)}")
    if settings.eviction not in EVICTIONS:
        raise ConfigError(f"semantic.eviction: expected one of {', '.join(EVICTIONS)}")
    if settings.min_similarity is not None and not 0 < settings.min_similarity < 1:
        raise ConfigError("semantic.min_similarity: must be between 0 and 1")
    if settings.num_threads < 0:
        raise ConfigError("semantic.num_threads: 0 (measured) or a positive count")
    if settings.max_error_rate is not None and not 0 < settings.max_error_rate < 0.5:
        raise ConfigError("semantic.max_error_rate: must be between 0 and 0.5")
    return settings

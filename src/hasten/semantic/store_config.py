"""What the semantic store is configured with (the runtime side of the ``[semantic]`` table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hasten.semantic.freshness import FreshnessPolicy
from hasten.semantic.index import DEFAULT_MAX_FLAT_ENTRIES


@dataclass(frozen=True, slots=True)
class SemanticStoreConfig:
    """The store's settings.

    ``target_precision`` (default): serve a hit only when the embedder's calibrated risk of a
    wrong answer is below ``1 - target_precision`` (``calibrated``). ``min_similarity`` set
    replaces that with a raw cosine cut-off (experts; required for an embedder with no
    calibration).
    """

    path: Path
    min_similarity: float | None = None
    target_precision: float = 0.95
    max_distance_ratio: float = 0.9
    num_candidates: int = 8
    max_entries: int = 1_000_000
    max_bytes: int = 2 * 1024**3
    freshness: FreshnessPolicy = field(default_factory=FreshnessPolicy)
    max_flat_entries: int = DEFAULT_MAX_FLAT_ENTRIES
    # Shared tier: entries in this Redis, every replica's index kept in step (``redis_tier``).
    redis_url: str | None = None
    redis_namespace: str = "hasten:semantic:"

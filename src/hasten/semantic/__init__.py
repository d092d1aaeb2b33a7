"""Semantic cache: answers a question asked in other words, and knows when it would be wrong.

Its packages are the ``semantic`` extra; nothing here imports them until the tier is built.
The gateway's view of it::

    from hasten.semantic.build import build_tier, require_extra

    require_extra(settings)                   # ConfigError naming the extra if it is missing
    tier = build_tier(settings, exact_cache)  # semantic/tier.py's SemanticTier
    hit = await tier.find(body, model=..., tenant=..., max_age_s=...)  # after an exact miss
    tier.remember(body, model=..., tenant=..., key=exact_key, ttl_s=...)  # after a miss
    await tier.aclose()

``tier.cache`` is the store (``store.SemanticCache``): lookups, inserts, imports
(``insert_many``), invalidation, reports of a wrong hit, stats.
"""

"""Whether a request may read or write the cache: client directives plus per-model policy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasten.config.cache_policy import ModelCachePolicy

# OpenAI samples at temperature 1 when the field is absent or null.
_DEFAULT_TEMPERATURE = 1.0


@dataclass(frozen=True, slots=True)
class CacheDirectives:
    """What the client asked for in ``Cache-Control``."""

    is_no_cache: bool = False
    is_no_store: bool = False
    max_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class CacheDecision:
    """What the request path should do; ``reason`` is for logs and response headers."""

    is_lookup: bool
    is_store: bool
    reason: str
    max_age_s: float | None = None
    ttl_s: float = 0.0


_NO_DIRECTIVES = CacheDirectives()


def parse_cache_control(header: str | None) -> CacheDirectives:
    """Parses a request ``Cache-Control`` header; unknown or malformed parts are ignored."""
    if not header:
        return _NO_DIRECTIVES  # most requests: nothing to build
    is_no_cache = False
    is_no_store = False
    max_age_s: float | None = None
    for part in header.split(","):
        name, _, raw_value = part.partition("=")
        name = name.strip().lower()
        value = raw_value.strip().strip('"').strip()
        if name == "no-cache":
            is_no_cache = True
        elif name == "no-store":
            is_no_store = True
        elif name == "max-age":
            parsed = _parse_seconds(value)
            # Repeated max-age: honour the strictest rather than guessing which one was meant.
            if parsed is not None and (max_age_s is None or parsed < max_age_s):
                max_age_s = parsed
    return CacheDirectives(is_no_cache=is_no_cache, is_no_store=is_no_store, max_age_s=max_age_s)


def _parse_seconds(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def is_deterministic(body: Mapping[str, Any]) -> bool:
    """True when a repeated request is expected to get the same answer.

    ``temperature == 0`` or an explicit ``seed`` qualifies, except that ``n > 1`` at a
    positive temperature asks for several different samples.
    """
    temperature = body.get("temperature")
    if temperature is None:
        temperature = _DEFAULT_TEMPERATURE
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        return False
    n = body.get("n")
    if temperature > 0 and isinstance(n, int | float) and not isinstance(n, bool) and n > 1:
        return False
    return temperature == 0 or body.get("seed") is not None


def decide(
    body: Mapping[str, Any], policy: ModelCachePolicy, directives: CacheDirectives
) -> CacheDecision:
    """Combines policy, determinism and client directives into one decision."""
    if not policy.is_enabled:
        return CacheDecision(is_lookup=False, is_store=False, reason="disabled")
    if policy.is_deterministic_only and not is_deterministic(body):
        return CacheDecision(is_lookup=False, is_store=False, reason="non-deterministic")
    if directives is _NO_DIRECTIVES:  # most requests
        return CacheDecision(True, True, "cacheable", None, policy.ttl_s)
    skipped: list[str] = []
    if directives.is_no_cache:
        skipped.append("no-cache")
    elif directives.max_age_s == 0:
        # Nothing is younger than zero seconds: skip the lookup instead of paying for it.
        skipped.append("max-age=0")
    if directives.is_no_store:
        skipped.append("no-store")
    is_lookup = not (directives.is_no_cache or directives.max_age_s == 0)
    return CacheDecision(
        is_lookup=is_lookup,
        is_store=not directives.is_no_store,
        reason=", ".join(skipped) if skipped else "cacheable",
        max_age_s=directives.max_age_s,
        ttl_s=policy.ttl_s,
    )

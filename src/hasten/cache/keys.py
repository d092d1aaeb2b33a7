"""Exact-match cache keys: a digest of everything that can change an answer."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

# Bump when the canonical form changes so old entries can never be served for new keys.
_KEY_VERSION = 1

# Transport-only fields: they change how the answer is delivered, never what it says.
_EXCLUDED_FIELDS = frozenset({"stream", "stream_options", "user"})

# orjson only serializes 64-bit integers; an integral float beyond this stays a float.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def cache_key(body: Mapping[str, Any], *, endpoint: str, model: str, tenant: str) -> str:
    """Hex digest of the canonical request: resolved model, tenant, endpoint and every field
    except ``stream``, ``stream_options`` and ``user``.

    Insensitive to key order, formatting and ``0`` vs ``0.0``; sensitive to anything else.
    """
    canonical_body = {
        name: _canonical(value) for name, value in body.items() if name not in _EXCLUDED_FIELDS
    }
    canonical_body["model"] = model
    envelope = {"v": _KEY_VERSION, "endpoint": endpoint, "tenant": tenant, "body": canonical_body}
    return hashlib.blake2b(
        orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS), digest_size=32
    ).hexdigest()


def _canonical(value: Any) -> Any:
    """Normalizes numbers recursively; key order is handled by ``OPT_SORT_KEYS``."""
    if isinstance(value, str | bool) or value is None:
        return value
    if isinstance(value, float):
        if value.is_integer() and _MIN_INT <= value <= _MAX_INT:
            return int(value)
        return value
    if isinstance(value, int):
        if _MIN_INT <= value <= _MAX_INT:
            return value
        # Beyond 64 bits JSON parsers disagree anyway; keep it exact but serializable.
        return float(value) if float(value) == value else {"$bigint": str(value)}
    if isinstance(value, Mapping):
        return {str(name): _canonical(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value

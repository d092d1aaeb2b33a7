"""Exact-match cache keys: a digest of everything that can change an answer."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

# Bump when the canonical form changes so old entries can never be served for new keys.
# 2: the stored key is the tenant's namespace applied to a tenant-free request key.
_KEY_VERSION = 2

# Transport-only fields: they change how the answer is delivered, never what it says.
_EXCLUDED_FIELDS = frozenset({"stream", "stream_options", "user"})

# orjson only serializes 64-bit integers; an integral float beyond this stays a float.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def cache_key(body: Mapping[str, Any], *, endpoint: str, model: str, tenant: str) -> str:
    """The stored key: ``request_key`` inside the tenant's namespace."""
    return namespaced_key(request_key(body, endpoint=endpoint, model=model), tenant)


def request_key(body: Mapping[str, Any], *, endpoint: str, model: str) -> str:
    """Hex digest of the canonical request: resolved model, endpoint and every field
    except ``stream``, ``stream_options`` and ``user``; the same for every tenant.

    Insensitive to key order, formatting and ``0`` vs ``0.0``; sensitive to anything else.
    """
    canonical_body = {
        name: _normalized(value) if _needs_normalizing(value) else value
        for name, value in body.items()
        if name not in _EXCLUDED_FIELDS
    }
    canonical_body["model"] = model
    envelope = {"v": _KEY_VERSION, "endpoint": endpoint, "body": canonical_body}
    return hashlib.sha256(orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS)).hexdigest()


def namespaced_key(request_key: str, tenant: str) -> str:
    """The stored key of a request key in one tenant's namespace.

    Derived here, never taken from a client: whatever key a caller names, it can only
    reach entries of its own namespace.
    """
    return hashlib.sha256(orjson.dumps([_KEY_VERSION, tenant, request_key])).hexdigest()


def _needs_normalizing(value: Any) -> bool:
    """Cheap scan so the common body (no integral floats) is hashed without being copied."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return False
    # Plain loops: generator-based any() costs several times more per node here.
    if kind is dict:
        for item in value.values():  # noqa: SIM110
            if _needs_normalizing(item):
                return True
        return False
    if kind is list:
        for item in value:  # noqa: SIM110
            if _needs_normalizing(item):
                return True
        return False
    if kind is float:
        return bool(value.is_integer()) and _MIN_INT <= value <= _MAX_INT
    if kind is int:
        return not _MIN_INT <= value <= _MAX_INT
    return True  # subclasses, tuples, other mappings: let _normalized sort them out


def _normalized(value: Any) -> Any:
    """Integral floats become ints; key order is left to ``OPT_SORT_KEYS``."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict or (kind is not str and isinstance(value, Mapping)):
        return {str(name): _normalized(item) for name, item in value.items()}
    if kind is list or kind is tuple:
        return [_normalized(item) for item in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, float):
        if value.is_integer() and _MIN_INT <= value <= _MAX_INT:
            return int(value)
        return float(value)
    if isinstance(value, int):
        if _MIN_INT <= value <= _MAX_INT:
            return int(value)
        # Beyond 64 bits JSON parsers disagree anyway; keep it exact but serializable.
        return float(value) if float(value) == value else {"$bigint": str(value)}
    return value

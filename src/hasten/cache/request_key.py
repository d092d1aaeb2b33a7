"""Exact-match cache keys: a digest of everything that can change an answer."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

# Bump when the canonical form changes so old entries can never be served for new keys.
# 2: the stored key is the tenant's namespace applied to a tenant-free request key.
# 3: key order below the body's own fields counts (a JSON schema's property order is the
#    order strict structured output writes them in); request headers that reach the
#    upstream and can change its answer are part of the key.
_KEY_VERSION = 3

_MESSAGES = "messages"
# Transport-only fields: they change how the answer is delivered, never what it says.
_EXCLUDED_FIELDS = frozenset({"stream", "stream_options", "user"})

# orjson only serializes 64-bit integers; an integral float beyond this stays a float.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def cache_key(body: Mapping[str, Any], *, endpoint: str, model: str, tenant: str) -> str:
    """The stored key: ``request_key`` inside the tenant's namespace."""
    return namespaced_key(request_key(body, endpoint=endpoint, model=model), tenant)


def request_key(body: Mapping[str, Any], *, endpoint: str, model: str) -> str:
    """Hex digest of the canonical request: resolved model, endpoint and every field except
    ``stream``, ``stream_options`` and ``user``; the same for every tenant.

    Insensitive to the order of the body's own fields and of each message's, formatting and
    ``0`` vs ``0.0``; sensitive to anything else, the order of keys elsewhere included (a
    JSON schema's properties are written in their order by strict structured output).
    Headers that can change the answer vary it per request (``with_headers``).
    """
    canonical_body = {
        name: _canonical(name, value)
        for name, value in sorted(body.items())
        if name not in _EXCLUDED_FIELDS and name != "model"
    }
    canonical_body["model"] = model
    envelope = {"v": _KEY_VERSION, "endpoint": endpoint, "body": canonical_body}
    return hashlib.sha256(orjson.dumps(envelope)).hexdigest()


def with_headers(request: str, headers: Sequence[tuple[str, str]]) -> str:
    """``request`` (a body's ``request_key``) varied by the forwarded request ``headers``
    that can change the answer ((lower-case name, value) pairs; none: ``request`` itself).
    Apart from ``request_key`` because a body's key is kept for its repeats
    (``hasten.proxy.fronts``) while headers are read per request."""
    if not headers:
        return request
    pairs = [[name, value] for name, value in sorted(headers)]
    return hashlib.sha256(orjson.dumps([_KEY_VERSION, request, pairs])).hexdigest()


def namespaced_key(request_key: str, tenant: str) -> str:
    """The stored key of a request key in one tenant's namespace.

    Derived here, never taken from a client: whatever key a caller names, it can only
    reach entries of its own namespace.
    """
    return hashlib.sha256(orjson.dumps([_KEY_VERSION, tenant, request_key])).hexdigest()


def _canonical(name: str, value: Any) -> Any:
    if name == _MESSAGES and isinstance(value, list | tuple):
        # A message's own fields (role, content, name, ...) are read by name: their order
        # never reaches the model, so it is not part of the key.
        value = [_sorted_fields(message) for message in value]
    return _normalized(value) if _needs_normalizing(value) else value


def _sorted_fields(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    return {name: message[name] for name in sorted(message)}


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
    """Integral floats become ints; key order stays as sent."""
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

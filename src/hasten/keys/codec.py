"""A key record as stored bytes, with a checksum: a damaged record is refused, not trusted.

``vk1:<sha256 hex of the payload>:<payload>``, the payload being the record as JSON with
sorted keys (deterministic: the stores compare bytes to detect a concurrent change). The
checksum catches a truncated, bit-flipped or hand-edited row; it is no signature (who can
write the store can write a valid row), which is why the store is the admin's to guard.
Every field is type-checked on the way back, so a row that parses is a well-formed record.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

from hasten.config.key_fields import key_limits, key_models, limits_dict
from hasten.errors import DamagedKeyRecord, InvalidKeyField
from hasten.keys.record import ID_PREFIX, KeyRecord

MAGIC = b"vk1:"
_SUM_CHARS = 64


def encode(record: KeyRecord) -> bytes:
    payload = orjson.dumps(_fields(record), option=orjson.OPT_SORT_KEYS)
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b":" + payload


def decode(raw: bytes) -> KeyRecord:
    """The record in ``raw``; raises DamagedKeyRecord if anything about it is off."""
    head, payload = raw[: len(MAGIC) + _SUM_CHARS + 1], raw[len(MAGIC) + _SUM_CHARS + 1 :]
    if not head.startswith(MAGIC) or head[-1:] != b":":
        raise DamagedKeyRecord("not a key record")
    expected = hashlib.sha256(payload).hexdigest().encode()
    if not hmac.compare_digest(head[len(MAGIC) : -1], expected):
        raise DamagedKeyRecord("checksum mismatch")
    try:
        data = orjson.loads(payload)
        return _record(data)
    except (orjson.JSONDecodeError, InvalidKeyField, KeyError, TypeError, ValueError) as exc:
        raise DamagedKeyRecord(f"fields do not parse: {type(exc).__name__}") from None


def _fields(record: KeyRecord) -> dict[str, Any]:
    return {
        "id": record.key_id,
        "tenant": record.tenant,
        "name": record.name,
        "created_s": record.created_s,
        "secret_sha256": record.secret_sha256.hex(),
        "hint": record.hint,
        "models": None if record.models is None else sorted(record.models),
        "limits": limits_dict(record.limits),
        "revoked": record.is_revoked,
        "revision": record.revision,
    }


def _record(data: Any) -> KeyRecord:
    if not isinstance(data, dict):
        raise TypeError("not an object")
    digest = bytes.fromhex(_typed(data, "secret_sha256", str))
    key_id = _typed(data, "id", str)
    if len(digest) != hashlib.sha256().digest_size or not key_id.startswith(ID_PREFIX):
        raise ValueError("bad digest or id")
    limits = data["limits"]
    if not isinstance(limits, dict):
        raise TypeError("limits")
    revision = _typed(data, "revision", int)
    created_s = data["created_s"]
    if not isinstance(created_s, int | float) or isinstance(created_s, bool):
        raise TypeError("created_s")
    return KeyRecord(
        key_id=key_id,
        tenant=_typed(data, "tenant", str),
        name=_typed(data, "name", str),
        created_s=float(created_s),
        secret_sha256=digest,
        hint=_typed(data, "hint", str),
        models=key_models(data["models"]),
        limits=key_limits(limits),
        is_revoked=_typed(data, "revoked", bool),
        revision=revision,
    )


def _typed(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(name)
    return value

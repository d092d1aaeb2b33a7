"""What ``/admin/keys`` reads and writes (pure): request bodies checked field by field into
OpenAI-shaped 400s, and records shown without their secret (only a hint of it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hasten.config.key_fields import key_limits, key_models, limits_dict
from hasten.config.limits import KeyLimits
from hasten.errors import InvalidKeyField, InvalidRequest
from hasten.keys.record import SECRET_PREFIX, KeyRecord

MAX_NAME_CHARS = 128
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
KEY_ID = re.compile(r"vk_[0-9a-f]{16}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CREATE_FIELDS = ("tenant", "name", "models", "limits")
_PATCH_FIELDS = ("name", "models", "limits")


@dataclass(frozen=True, slots=True)
class KeyFields:
    """A create or patch request's fields (for a patch, None: left as it is)."""

    tenant: str | None
    name: str | None
    models: frozenset[str] | None
    limits: KeyLimits | None
    has_models: bool  # a patch's "models": null means every model again


def creation(body: dict[str, Any]) -> KeyFields:
    """``POST /admin/keys``: ``tenant`` (required), ``name``, ``models``, ``limits``."""
    _only(body, _CREATE_FIELDS)
    tenant = body.get("tenant")
    if not isinstance(tenant, str) or TENANT.fullmatch(tenant) is None:
        raise InvalidRequest(
            "'tenant' is required: 1 to 64 letters, digits, '.', '_', ':' or '-'",
            param="tenant",
            code="missing_required_parameter" if tenant is None else "invalid_value",
        )
    return KeyFields(
        tenant=tenant,
        name=_name(body.get("name", "")),
        models=_models(body.get("models")),
        limits=_limits(body.get("limits")),
        has_models=True,
    )


def patch(body: dict[str, Any]) -> KeyFields:
    """``PATCH /admin/keys/{id}``: any of ``name``, ``models``, ``limits`` (each replaced
    whole; ``"limits": {}`` or ``null`` lifts every limit, ``"models": null`` allows all)."""
    _only(body, _PATCH_FIELDS)
    if not body:
        raise InvalidRequest(
            f"nothing to change: give one of {', '.join(_PATCH_FIELDS)}",
            param=None,
            code="missing_required_parameter",
        )
    return KeyFields(
        tenant=None,
        name=_name(body["name"]) if "name" in body else None,
        models=_models(body.get("models")),
        limits=_limits(body.get("limits")) if "limits" in body else None,
        has_models="models" in body,
    )


def shown(record: KeyRecord) -> dict[str, Any]:
    """A record as the admin API shows it: never its secret, nor the secret's digest."""
    return {
        "object": "gateway.key",
        "id": record.key_id,
        "tenant": record.tenant,
        "name": record.name,
        "created": int(record.created_s),
        "secret_hint": f"{SECRET_PREFIX}...{record.hint}",
        "models": None if record.models is None else sorted(record.models),
        "limits": limits_dict(record.limits),
        "revoked": record.is_revoked,
        "revision": record.revision,
    }


def with_secret(record: KeyRecord, secret: str) -> dict[str, Any]:
    """The one response that carries a secret (create, rotate): shown once, kept nowhere."""
    return {**shown(record), "secret": secret}


def _only(body: dict[str, Any], known: tuple[str, ...]) -> None:
    for name in body:
        if name not in known:
            raise InvalidRequest(
                f"unknown field '{name[:64]}' (known: {', '.join(known)})",
                param=name[:64],
                code="unknown_parameter",
            )


def _name(value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or _CONTROL.search(value):
        raise InvalidRequest(
            f"'name' must be a string of at most {MAX_NAME_CHARS} characters, "
            "without control characters",
            param="name",
            code="invalid_value",
        )
    return value


def _models(value: object) -> frozenset[str] | None:
    try:
        return key_models(value)
    except InvalidKeyField as exc:
        raise InvalidRequest(
            f"{exc.field}: {exc.problem}", param="models", code="invalid_value"
        ) from None


def _limits(value: object) -> KeyLimits:
    if value is None:
        return KeyLimits()
    if not isinstance(value, dict):
        raise InvalidRequest("'limits' must be an object", param="limits", code="invalid_type")
    try:
        return key_limits(value)
    except InvalidKeyField as exc:
        raise InvalidRequest(
            f"limits.{exc.field}: {exc.problem}", param=f"limits.{exc.field}", code="invalid_value"
        ) from None

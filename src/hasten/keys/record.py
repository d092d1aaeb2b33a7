"""One virtual key: who it belongs to, what it may do, and its secret only as a digest.

The secret is 32 random bytes from ``secrets`` (256 bits), shown once and kept as its
SHA-256. A slow password hash (bcrypt, scrypt, argon2) protects low-entropy secrets from
guessing after a leak of the store; a 256-bit random secret cannot be guessed however fast
the hash, so a slow one would only add its cost to every cold lookup. An unsalted digest
is also what lets a store find the key by its digest (an index), with no scan.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field, replace

from hasten.config.limits import KeyLimits
from hasten.values.caller import Caller

ID_PREFIX = "vk_"
SECRET_PREFIX = "hsk_"  # recognisable by secret scanners and by people
SECRET_BYTES = 32
HINT_CHARS = 4


def new_key_id() -> str:
    """``vk_`` and 16 random hex digits: a handle, not a secret."""
    return ID_PREFIX + secrets.token_hex(8)


def new_secret() -> str:
    """A fresh secret: ``hsk_`` and 43 URL-safe characters (256 random bits)."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def secret_digest(secret: str | bytes) -> bytes:
    """The only form in which a secret is kept (the same as ``hasten.auth`` uses)."""
    return hashlib.sha256(secret.encode() if isinstance(secret, str) else secret).digest()


def secret_hint(secret: str) -> str:
    """The last characters, enough to tell keys apart in a list; not enough to use one."""
    return secret[-HINT_CHARS:]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored virtual key. ``revision`` grows with every change (rotate, patch, revoke)."""

    key_id: str
    tenant: str
    name: str
    created_s: float  # Unix time
    secret_sha256: bytes = field(repr=False)
    hint: str
    models: frozenset[str] | None = None  # None: every model
    limits: KeyLimits = field(default_factory=KeyLimits)
    is_revoked: bool = False
    revision: int = 1

    def caller(self) -> Caller:
        """Who a request with this key is, as the request path sees it."""
        limits = None if self.limits.is_unlimited else self.limits
        return Caller(self.tenant, self.key_id, limits, self.models)

    def rotated(self, secret: str) -> KeyRecord:
        return replace(
            self,
            secret_sha256=secret_digest(secret),
            hint=secret_hint(secret),
            revision=self.revision + 1,
        )

    def revoked(self) -> KeyRecord:
        return replace(self, is_revoked=True, revision=self.revision + 1)

    def changed(self, *, name: str, models: frozenset[str] | None, limits: KeyLimits) -> KeyRecord:
        return replace(self, name=name, models=models, limits=limits, revision=self.revision + 1)


def new_record(
    tenant: str,
    name: str,
    models: frozenset[str] | None,
    limits: KeyLimits,
    now_s: float,
) -> tuple[KeyRecord, str]:
    """A new key and its secret (returned once; only its digest is in the record)."""
    secret = new_secret()
    record = KeyRecord(
        key_id=new_key_id(),
        tenant=tenant,
        name=name,
        created_s=now_s,
        secret_sha256=secret_digest(secret),
        hint=secret_hint(secret),
        models=models,
        limits=limits,
    )
    return record, secret

"""Gateway keys and tenants: who is asking, and whose cache namespace they use."""

from __future__ import annotations

import hashlib
import hmac

from hasten.config import TenantKey
from hasten.errors import Unauthorized

PUBLIC_TENANT = "public"


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class Authenticator:
    """Maps a bearer key to a tenant.

    With gateway keys configured, only those keys are accepted and each names a tenant.
    Without them hasten is a pass-through: the caller's own key goes upstream, and the
    tenant is derived from a hash of it, so two callers with different keys never share
    cached answers.
    """

    def __init__(self, keys: tuple[TenantKey, ...]) -> None:
        # Only digests are kept: the plaintext keys need not live in this object.
        self._tenants = {_digest(k.key.encode()): k.tenant for k in keys}
        self.is_enforcing = bool(keys)

    def tenant_for(self, authorization: bytes | None) -> str:
        token = _bearer(authorization)
        if not self.is_enforcing:
            if token is None:
                return PUBLIC_TENANT
            return "key-" + hashlib.blake2b(token, digest_size=8).hexdigest()
        if token is None:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        digest = _digest(token)
        for known, tenant in self._tenants.items():
            if hmac.compare_digest(known, digest):
                return tenant
        raise Unauthorized("invalid API key")


def _bearer(authorization: bytes | None) -> bytes | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()

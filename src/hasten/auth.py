"""Gateway keys and tenants: who is asking, and whose cache namespace they use."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Protocol

from hasten.config import DEFAULT_ADMIN_KEY_ENV, TenantKey
from hasten.errors import Unauthorized
from hasten.values.caller import ADMIN, Caller

PUBLIC_TENANT = "public"
ADMIN_KEY_HINT = (
    f"export {DEFAULT_ADMIN_KEY_ENV}=<a long random secret> before starting hasten (or name "
    "another variable in [server] admin_api_key_env) and send it as 'Authorization: Bearer "
    "<admin key>'"
)


_MAX_ANONYMOUS_CALLERS = 4096


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class KeyLookup(Protocol):
    """The virtual keys (``hasten.keys.directory.KeyDirectory``), found by digest."""

    async def resolve(self, digest: bytes) -> Caller | None: ...


class Authenticator:
    """Maps a bearer key to a tenant, or to the operator.

    With gateway keys configured, only those keys are accepted and each names a tenant.
    Without them hasten is a pass-through: the caller's own key goes upstream, and the
    tenant is derived from a hash of it, so two callers with different keys never share
    cached answers. The admin key (``[server] admin_api_key_env``) is neither: it opens
    the admin API and global views and is never accepted for model requests, so it is
    never forwarded upstream. With virtual keys (``virtual``), a key that is neither the
    admin key nor a static one is looked up there: only ``resolve`` and
    ``resolve_model_caller`` (async) see them; ``caller`` knows the static keys only.
    """

    def __init__(
        self,
        keys: tuple[TenantKey, ...],
        admin_key: str | None = None,
        virtual: KeyLookup | None = None,
    ) -> None:
        # Only digests are kept: the plaintext keys need not live in this object.
        self._callers = {
            _digest(k.key.encode()): Caller(k.tenant, k.key_id or k.tenant, k.limits, k.models)
            for k in keys
        }
        self._admin = _digest(admin_key.encode()) if admin_key else None
        self._virtual = virtual
        self.is_enforcing = bool(keys) or virtual is not None
        self.has_admin_key = self._admin is not None
        # Pass-through tenants by the hash that names them: one Caller per key, not per request.
        self._anonymous: dict[bytes, Caller] = {}

    def tenant_for(self, authorization: bytes | None) -> str:
        """The tenant of a model request (the admin key is refused)."""
        tenant = self.model_caller(authorization).tenant
        assert tenant is not None
        return tenant

    def model_caller(self, authorization: bytes | None) -> Caller:
        """Who sends a model request, with its key's limits (the admin key is refused)."""
        return _not_admin(self.caller(authorization))

    async def resolve_model_caller(self, authorization: bytes | None) -> Caller:
        """``model_caller``, virtual keys included."""
        return _not_admin(await self.resolve(authorization))

    async def resolve(self, authorization: bytes | None) -> Caller:
        """``caller``, virtual keys included: the admin key and the static keys first, then
        the virtual keys (a cache hit on the request path; a store lookup when cold)."""
        if self._virtual is None:
            return self.caller(authorization)
        token = _bearer(authorization)
        if token is None:
            return self.caller(authorization)
        digest = _digest(token)
        known = self._known(digest)
        if known is None:
            known = await self._virtual.resolve(digest)
        if known is None:
            raise Unauthorized("invalid API key")
        return known

    def is_admin_credential(self, authorization: bytes | None) -> bool:
        """True for the admin key, as a Bearer token or as the password of HTTP Basic (the
        only way a browser sends a secret on navigation; the user name is ignored)."""
        if self._admin is None:
            return False
        token = _bearer(authorization)
        if token is None:
            token = _basic_password(authorization)
        return token is not None and hmac.compare_digest(self._admin, _digest(token))

    def caller(self, authorization: bytes | None) -> Caller:
        """Who is asking; raises 401 for a missing or unknown key when keys are enforced."""
        token = _bearer(authorization)
        if token is None:
            if self.is_enforcing:
                raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
            return Caller(tenant=PUBLIC_TENANT)
        if not self.is_enforcing:
            if self._admin is not None and hmac.compare_digest(self._admin, _digest(token)):
                return ADMIN
            return self._anonymous_caller(token)
        known = self._known(_digest(token))
        if known is None:
            raise Unauthorized("invalid API key")
        return known

    def _anonymous_caller(self, token: bytes) -> Caller:
        name = hashlib.blake2b(token, digest_size=8).digest()
        caller = self._anonymous.get(name)
        if caller is None:
            if len(self._anonymous) >= _MAX_ANONYMOUS_CALLERS:
                self._anonymous.clear()  # a bound, not an LRU: rebuilding one costs a microsecond
            caller = self._anonymous[name] = Caller("key-" + name.hex())
        return caller

    def _known(self, digest: bytes) -> Caller | None:
        """The admin key or a static key with this digest."""
        # Constant-time comparisons of fixed-size digests: timing shows no key's prefix.
        if self._admin is not None and hmac.compare_digest(self._admin, digest):
            return ADMIN
        for known, caller in self._callers.items():
            if hmac.compare_digest(known, digest):
                return caller
        return None


def _not_admin(caller: Caller) -> Caller:
    if caller.tenant is None:
        raise Unauthorized(
            "the admin key is only for /admin endpoints and /stats; "
            "send a tenant key (or your upstream key) for model requests"
        )
    return caller


def _bearer(authorization: bytes | None) -> bytes | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()


def _basic_password(authorization: bytes | None) -> bytes | None:
    if not authorization:
        return None
    scheme, _, encoded = authorization.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    _, colon, password = decoded.partition(b":")
    return password if colon and password else None

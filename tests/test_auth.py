"""Unit tests for hasten.auth.Authenticator: gateway keys, tenants, pass-through mode."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.auth import PUBLIC_TENANT, Authenticator
from hasten.config import TenantKey
from hasten.errors import Unauthorized
from hasten.values.caller import Caller

KEYS = (TenantKey(tenant="team-a", key="key-a-123"), TenantKey(tenant="team-b", key="key-b-456"))


@pytest.fixture
def enforcing() -> Authenticator:
    return Authenticator(KEYS)


def test_enforcing_flag() -> None:
    assert Authenticator(KEYS).is_enforcing
    assert not Authenticator(()).is_enforcing


def test_known_keys_map_to_tenants(enforcing: Authenticator) -> None:
    assert enforcing.tenant_for(b"Bearer key-a-123") == "team-a"
    assert enforcing.tenant_for(b"Bearer key-b-456") == "team-b"


@pytest.mark.parametrize(
    "header",
    [b"bearer key-a-123", b"BEARER key-a-123", b"  Bearer key-a-123  ", b"Bearer   key-a-123"],
)
def test_scheme_case_and_whitespace_tolerated(enforcing: Authenticator, header: bytes) -> None:
    assert enforcing.tenant_for(header) == "team-a"


@pytest.mark.parametrize("header", [None, b"", b"   "])
def test_missing_authorization_is_401(enforcing: Authenticator, header: bytes | None) -> None:
    with pytest.raises(Unauthorized) as info:
        enforcing.tenant_for(header)
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    assert info.value.error_type == "authentication_error"
    assert "missing" in info.value.message


@pytest.mark.parametrize(
    "header",
    [b"Bearer wrong", b"Bearer key-a-12", b"Bearer key-a-1234", b"Bearer KEY-A-123"],
)
def test_invalid_key_is_401(enforcing: Authenticator, header: bytes) -> None:
    with pytest.raises(Unauthorized, match="invalid API key") as info:
        enforcing.tenant_for(header)
    assert info.value.status_code == 401


@pytest.mark.parametrize(
    "header", [b"Bearer", b"Bearer ", b"Basic a2V5LWEtMTIz", b"key-a-123", b"Token key-a-123"]
)
def test_malformed_authorization_is_401(enforcing: Authenticator, header: bytes) -> None:
    with pytest.raises(Unauthorized) as info:
        enforcing.tenant_for(header)
    assert info.value.status_code == 401


def test_error_messages_never_echo_the_key(enforcing: Authenticator) -> None:
    with pytest.raises(Unauthorized) as info:
        enforcing.tenant_for(b"Bearer sk-leaked-secret")
    assert "sk-leaked-secret" not in str(info.value)
    assert b"sk-leaked-secret" not in info.value.to_json()


def test_plaintext_keys_not_stored(enforcing: Authenticator) -> None:
    state = repr(vars(enforcing))
    assert "key-a-123" not in state
    assert "key-b-456" not in state


def test_passthrough_without_key_is_public() -> None:
    auth = Authenticator(())
    assert auth.tenant_for(None) == PUBLIC_TENANT == "public"
    assert auth.tenant_for(b"") == PUBLIC_TENANT
    assert auth.tenant_for(b"Bearer ") == PUBLIC_TENANT


def test_passthrough_distinct_keys_distinct_tenants() -> None:
    auth = Authenticator(())
    a = auth.tenant_for(b"Bearer sk-one")
    b = auth.tenant_for(b"Bearer sk-two")
    assert a != b
    assert PUBLIC_TENANT not in (a, b)
    assert a.startswith("key-")
    assert "sk-one" not in a


def test_passthrough_tenant_stable_across_instances_and_formatting() -> None:
    first = Authenticator(()).tenant_for(b"Bearer sk-one")
    assert Authenticator(()).tenant_for(b"Bearer sk-one") == first
    assert Authenticator(()).tenant_for(b"bearer  sk-one ") == first


@settings(deadline=None)
@given(st.binary(min_size=1, max_size=40), st.binary(min_size=1, max_size=40))
def test_passthrough_tenants_distinct_property(key_a: bytes, key_b: bytes) -> None:
    key_a, key_b = key_a.strip() or b"x", key_b.strip() or b"y"
    auth = Authenticator(())
    tenant_a = auth.tenant_for(b"Bearer " + key_a)
    tenant_b = auth.tenant_for(b"Bearer " + key_b)
    assert tenant_a == auth.tenant_for(b"Bearer " + key_a)
    assert (tenant_a == tenant_b) == (key_a == key_b)
    assert tenant_a != PUBLIC_TENANT


def test_unauthorized_renders_openai_shape(enforcing: Authenticator) -> None:
    with pytest.raises(Unauthorized) as info:
        enforcing.tenant_for(None)
    body = info.value.to_dict()["error"]
    assert isinstance(body, dict)
    assert body["type"] == "authentication_error"
    assert body["code"] == "invalid_api_key"


@pytest.mark.parametrize("keys", [KEYS, ()])
def test_admin_key_is_the_operator_and_never_a_model_key(keys: tuple[TenantKey, ...]) -> None:
    auth = Authenticator(keys, "admin-key-789")
    assert auth.has_admin_key and not Authenticator(keys).has_admin_key
    assert auth.caller(b"Bearer admin-key-789").is_admin
    assert not auth.caller(b"Bearer " + (b"key-a-123" if keys else b"other")).is_admin
    with pytest.raises(Unauthorized, match="admin key"):
        auth.tenant_for(b"Bearer admin-key-789")
    assert "admin-key-789" not in repr(vars(auth))


def _basic(user: bytes, password: bytes) -> bytes:
    return b"Basic " + base64.b64encode(user + b":" + password)


@pytest.mark.parametrize(
    "header",
    [
        b"Bearer the-admin-key",
        b"bearer   the-admin-key ",
        _basic(b"", b"the-admin-key"),
        _basic(b"anyone", b"the-admin-key"),
        b"basic " + _basic(b"x", b"the-admin-key")[6:],
    ],
)
def test_admin_credential_as_bearer_or_basic_password(header: bytes) -> None:
    assert Authenticator(KEYS, "the-admin-key").is_admin_credential(header)
    assert Authenticator((), "the-admin-key").is_admin_credential(header)


@pytest.mark.parametrize(
    "header",
    [
        None,
        b"",
        b"Basic",
        b"Basic !!!not-base64",
        _basic(b"the-admin-key", b""),  # the key as the user name is not the password
        b"Basic " + b"dGhlLWFkbWluLWtleQ==",  # "the-admin-key" without a colon
        _basic(b"x", b"the-admin-ke"),
        _basic(b"x", b"the-admin-key "),
        b"Bearer key-a-123",  # a tenant key is not the admin key
        _basic(b"x", b"key-a-123"),
        b"Digest the-admin-key",
    ],
)
def test_other_credentials_are_not_the_admin_key(header: bytes | None) -> None:
    assert not Authenticator(KEYS, "the-admin-key").is_admin_credential(header)


def test_no_admin_key_no_admin_credential() -> None:
    assert not Authenticator(KEYS).is_admin_credential(_basic(b"x", b""))
    assert not Authenticator(()).is_admin_credential(b"Bearer anything")


def test_basic_is_never_a_model_caller() -> None:
    with pytest.raises(Unauthorized):
        Authenticator(KEYS, "the-admin-key").caller(_basic(b"x", b"the-admin-key"))


class FakeVirtualKeys:
    """A KeyLookup with one virtual key, counting lookups."""

    def __init__(self, secret: bytes, caller: Caller) -> None:
        self._digest = hashlib.sha256(secret).digest()
        self._caller = caller
        self.num_lookups = 0

    async def resolve(self, digest: bytes) -> Caller | None:
        self.num_lookups += 1
        return self._caller if digest == self._digest else None


VIRTUAL = Caller("team-v", "vk_0123456789abcdef")


async def test_resolve_checks_static_keys_before_virtual_ones() -> None:
    virtual = FakeVirtualKeys(b"hsk_virtual", VIRTUAL)
    auth = Authenticator(KEYS, "admin-secret", virtual)
    assert (await auth.resolve(b"Bearer key-a-123")).tenant == "team-a"
    assert (await auth.resolve(b"Bearer admin-secret")).is_admin
    assert virtual.num_lookups == 0
    assert await auth.resolve_model_caller(b"Bearer hsk_virtual") == VIRTUAL
    with pytest.raises(Unauthorized):
        await auth.resolve(b"Bearer hsk_unknown")
    with pytest.raises(Unauthorized):
        await auth.resolve_model_caller(b"Bearer admin-secret")


async def test_virtual_keys_alone_enforce_keys() -> None:
    auth = Authenticator((), None, FakeVirtualKeys(b"hsk_virtual", VIRTUAL))
    assert auth.is_enforcing
    with pytest.raises(Unauthorized):
        await auth.resolve(None)
    with pytest.raises(Unauthorized):
        await auth.resolve(b"Bearer some-upstream-key")  # no pass-through any more
    # The synchronous path knows only static keys: a virtual one is not a key there.
    with pytest.raises(Unauthorized):
        auth.caller(b"Bearer hsk_virtual")


async def test_resolve_without_virtual_keys_is_caller() -> None:
    auth = Authenticator(())
    assert (await auth.resolve(b"Bearer anything")).tenant == auth.caller(b"Bearer anything").tenant
    assert (await auth.resolve(None)).tenant == PUBLIC_TENANT


def test_a_pass_through_key_names_one_tenant_built_once_and_the_memo_is_bounded() -> None:
    auth = Authenticator(())
    first = auth.caller(b"Bearer sk-one")
    assert auth.caller(b"Bearer sk-one") is first  # built once per key, not per request
    assert first.tenant == "key-" + hashlib.blake2b(b"sk-one", digest_size=8).hexdigest()
    assert auth.caller(b"Bearer sk-two").tenant != first.tenant
    for i in range(5000):
        auth.caller(b"Bearer sk-%d" % i)
    assert len(auth._anonymous) <= 4096
    assert auth.caller(b"Bearer sk-one") == first  # rebuilt alike after the memo was dropped

"""Unit tests for hasten.keys.record: ids, secrets, digests, hints and the record's changes."""

from __future__ import annotations

import hashlib

from hasten.config.limits import KeyLimits
from hasten.keys.record import (
    HINT_CHARS,
    ID_PREFIX,
    SECRET_PREFIX,
    new_key_id,
    new_record,
    new_secret,
    secret_digest,
)


def test_secrets_are_random_and_long() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith(SECRET_PREFIX)
        assert len(secret) - len(SECRET_PREFIX) >= 43  # 256 bits in URL-safe base64


def test_ids_are_handles() -> None:
    key_id = new_key_id()
    assert key_id.startswith(ID_PREFIX) and len(key_id) == len(ID_PREFIX) + 16


def test_new_record_keeps_only_the_digest_and_a_hint() -> None:
    record, secret = new_record("team-a", "ci", frozenset({"m"}), KeyLimits(5), now_s=10.0)
    assert record.secret_sha256 == hashlib.sha256(secret.encode()).digest()
    assert record.secret_sha256 == secret_digest(secret.encode())
    assert record.hint == secret[-HINT_CHARS:]
    assert secret not in repr(record)
    assert record.secret_sha256.hex() not in repr(record)
    assert record.revision == 1 and not record.is_revoked


def test_caller_carries_tenant_id_limits_and_models() -> None:
    record, _ = new_record("team-a", "", frozenset({"m"}), KeyLimits(5), now_s=0.0)
    caller = record.caller()
    assert (caller.tenant, caller.key_id, caller.models) == (
        "team-a",
        record.key_id,
        frozenset({"m"}),
    )
    assert caller.limits == KeyLimits(5)
    unlimited, _ = new_record("team-a", "", None, KeyLimits(), now_s=0.0)
    assert unlimited.caller().limits is None


def test_rotation_revocation_and_change_bump_the_revision() -> None:
    record, _ = new_record("t", "n", None, KeyLimits(), now_s=0.0)
    other = new_secret()
    rotated = record.rotated(other)
    assert rotated.secret_sha256 == secret_digest(other) != record.secret_sha256
    assert rotated.hint == other[-HINT_CHARS:]
    assert rotated.revision == 2
    assert record.revoked().is_revoked and record.revoked().revision == 2
    changed = record.changed(name="x", models=frozenset({"a"}), limits=KeyLimits(1))
    assert (changed.name, changed.models, changed.limits.requests_per_minute) == (
        "x",
        frozenset({"a"}),
        1,
    )
    assert changed.secret_sha256 == record.secret_sha256

"""Unit tests for hasten.keys.codec: records round-trip, and a damaged one is refused."""

from __future__ import annotations

import orjson
import pytest

from hasten.config.limits import KeyLimits
from hasten.errors import DamagedKeyRecord
from hasten.keys.codec import MAGIC, decode, encode
from hasten.keys.record import KeyRecord, new_record


def _record() -> KeyRecord:
    limits = KeyLimits(10, 1000, 2, 5.0, 86_400.0)
    return new_record("team-a", "bot", frozenset({"a", "b"}), limits, now_s=1.5)[0]


def test_round_trip_is_exact_and_deterministic() -> None:
    record = _record()
    assert decode(encode(record)) == record
    assert encode(decode(encode(record))) == encode(record)
    revoked = record.revoked()
    assert decode(encode(revoked)) == revoked


def test_every_flipped_byte_is_refused() -> None:
    raw = encode(_record())
    for i in range(0, len(raw), 7):
        damaged = raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1 :]
        with pytest.raises(DamagedKeyRecord):
            decode(damaged)


@pytest.mark.parametrize("cut", [0, 3, 10, 70, -1])
def test_truncated_is_refused(cut: int) -> None:
    with pytest.raises(DamagedKeyRecord):
        decode(encode(_record())[:cut])


def _resealed(payload: dict[str, object]) -> bytes:
    """A record with a valid checksum over fields that are wrong: checked field by field."""
    import hashlib

    body = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b":" + body


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tenant", 3),
        ("revoked", "no"),
        ("revision", True),
        ("secret_sha256", "abcd"),
        ("id", "not-a-vk"),
        ("models", []),
        ("limits", {"requests_per_minute": -1}),
        ("created_s", "yesterday"),
    ],
)
def test_a_checksummed_record_with_a_bad_field_is_refused(name: str, value: object) -> None:
    raw = encode(_record())
    payload = orjson.loads(raw[len(MAGIC) + 65 :])
    payload[name] = value
    with pytest.raises(DamagedKeyRecord):
        decode(_resealed(payload))


def test_a_missing_field_is_refused() -> None:
    payload = orjson.loads(encode(_record())[len(MAGIC) + 65 :])
    del payload["tenant"]
    with pytest.raises(DamagedKeyRecord):
        decode(_resealed(payload))

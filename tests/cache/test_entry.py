from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache.entry import CachedAnswer
from hasten.errors import DamagedCacheEntry, OutdatedCacheEntry

times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
ttls = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@settings(deadline=None)
@given(body=st.binary(), endpoint=st.text(max_size=12), created_at=times, ttl_s=ttls)
def test_json_answer_round_trips(
    body: bytes, endpoint: str, created_at: float, ttl_s: float
) -> None:
    answer = CachedAnswer.from_body(body, endpoint=endpoint, ttl_s=ttl_s, created_at=created_at)
    assert CachedAnswer.decode(answer.encode()) == answer


@settings(deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=20), created_at=times, ttl_s=ttls)
def test_stream_answer_round_trips(chunks: list[bytes], created_at: float, ttl_s: float) -> None:
    answer = CachedAnswer.from_chunks(chunks, endpoint="chat", ttl_s=ttl_s, created_at=created_at)
    decoded = CachedAnswer.decode(answer.encode())
    assert decoded.kind == "stream"
    assert list(decoded.chunks or ()) == chunks
    assert (decoded.created_at, decoded.ttl_s, decoded.endpoint) == (created_at, ttl_s, "chat")


def test_encoding_is_compact() -> None:
    body = b'{"id":"x","choices":[{"message":{"content":"' + b"\\" * 1000 + b'"}}]}'
    answer = CachedAnswer.from_body(body, endpoint="chat", ttl_s=60.0, created_at=1.0)
    # The payload is stored raw, not re-escaped inside JSON.
    assert len(answer.encode()) < len(body) + 64
    assert answer.encode()[0] == 2  # version byte: 2 has a checksum


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x02\x00\x00\x00\x02{}",  # unknown version
        b"\x01\x00\x00\x00\xff{}",  # header longer than data
        b"\x01\x00\x00\x00\x02{}",  # header without fields
        b"\x01\x00\x00\x00\x04nope",
        b'\x01\x00\x00\x00\x1e{"k":"x","e":"chat","c":1,"t":2}',
        b'\x01\x00\x00\x00\x21{"k":"stream","e":"c","c":1,"t":2}',
        b'\x01\x00\x00\x00\x29{"k":"stream","e":"c","c":1,"t":2,"n":[9]}ab',
        b'\x01\x00\x00\x00\x1e{"k":"json","e":5,"c":1,"t":2}x',
    ],
)
def test_decode_rejects_damaged_data(data: bytes) -> None:
    with pytest.raises(ValueError):
        CachedAnswer.decode(data)


@settings(deadline=None)
@given(st.binary())
def test_decode_of_garbage_raises_only_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        CachedAnswer.decode(data)


def test_freshness() -> None:
    answer = CachedAnswer.from_body(b"{}", endpoint="chat", ttl_s=100.0, created_at=1000.0)
    assert answer.expires_at == 1100.0
    assert answer.is_fresh(1000.0)
    assert answer.is_fresh(1099.9)
    assert not answer.is_fresh(1100.0)
    assert answer.is_fresh(1010.0, max_age_s=11.0)
    assert not answer.is_fresh(1010.0, max_age_s=10.0)
    assert not answer.is_fresh(1000.0, max_age_s=0.0)


def test_size_counts_payload() -> None:
    small = CachedAnswer.from_chunks([b"a"], endpoint="chat", ttl_s=1.0)
    big = CachedAnswer.from_chunks([b"a" * 1000, b"b" * 1000], endpoint="chat", ttl_s=1.0)
    assert big.size_bytes - small.size_bytes == 1999


def test_kind_needs_its_payload() -> None:
    with pytest.raises(ValueError):
        CachedAnswer(kind="json", endpoint="chat", created_at=0.0, ttl_s=1.0)
    with pytest.raises(ValueError):
        CachedAnswer(kind="stream", endpoint="chat", created_at=0.0, ttl_s=1.0)


@settings(deadline=None)
@given(body=st.binary(min_size=1, max_size=200), data=st.data())
def test_any_changed_byte_fails_the_checksum(body: bytes, data: st.DataObject) -> None:
    encoded = bytearray(
        CachedAnswer.from_body(body, endpoint="chat", ttl_s=60.0, created_at=1.0).encode()
    )
    index = data.draw(st.integers(min_value=1, max_value=len(encoded) - 1))
    encoded[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(DamagedCacheEntry):
        CachedAnswer.decode(bytes(encoded))


def test_format_without_checksum_is_outdated() -> None:
    header = b'{"k":"json","e":"chat","c":1.0,"t":60.0}'
    version_1 = b"\x01" + len(header).to_bytes(4, "big") + header + b"answer"
    with pytest.raises(OutdatedCacheEntry):
        CachedAnswer.decode(version_1)


def test_a_stream_answer_keeps_its_merged_body_in_memory_only() -> None:
    chunks = [b'{"a": 1}', b'{"b": 2}']
    answer = CachedAnswer.from_chunks(chunks, endpoint="chat", ttl_s=5.0, created_at=1.0)
    merged = answer.with_body(b'{"merged": true}')
    assert (merged.kind, merged.chunks, merged.body) == ("stream", chunks, b'{"merged": true}')
    assert merged.size_bytes == answer.size_bytes + len(b'{"merged": true}')
    assert (merged.created_at, merged.ttl_s, merged.endpoint) == (1.0, 5.0, "chat")
    # Derived from the chunks: never written to a shared tier, so never read back from one.
    assert merged.encode() == answer.encode()
    assert CachedAnswer.decode(merged.encode()).body is None
    with pytest.raises(ValueError):
        CachedAnswer.from_body(b"{}", endpoint="chat", ttl_s=1.0).with_body(b"{}")


def test_the_usage_is_read_once_from_the_body_or_the_last_event() -> None:
    usage = b'"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}'
    body = CachedAnswer.from_body(b'{"id":"x",' + usage + b"}", endpoint="chat", ttl_s=60)
    assert body.usage == (7, 3)
    chunks = [b'{"choices":[]}', b'{"choices":[],' + usage + b"}"]
    stream = CachedAnswer.from_chunks(chunks, endpoint="chat", ttl_s=60)
    assert stream.usage == (7, 3) and stream.usage_tail == chunks[-1]
    assert CachedAnswer.decode(stream.encode()).usage == (7, 3)  # derived, not stored
    assert CachedAnswer.from_chunks([b"{}"], endpoint="chat", ttl_s=60).usage == (None, None)

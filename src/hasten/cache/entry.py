"""A cached successful answer and its compact binary encoding."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import orjson

from hasten.errors import DamagedCacheEntry, OutdatedCacheEntry
from hasten.values.usage import usage_tokens

AnswerKind = Literal["json", "stream"]

# 2: a CRC-32 of everything after the prefix, so a stored answer altered on disk (or in
# Redis) is a miss, never served. 1 (no checksum) is refused as outdated.
_FORMAT_VERSION = 2
_OUTDATED_VERSIONS = frozenset({1})
# Version byte, big-endian length of the orjson header that precedes the raw payload, and
# the CRC-32 of header and payload. CRC-32 runs at ~3 GB/s here: under 1 us for 2 KB.
_PREFIX = struct.Struct(">BII")
# Rough per-entry bookkeeping (object, header fields) so many tiny entries still count.
_FIXED_SIZE_BYTES = 96


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """A whole successful upstream answer.

    ``kind == "json"`` carries the response ``body``; ``kind == "stream"`` carries ``chunks``,
    the SSE ``data`` payloads without the ``data: `` prefix and without ``[DONE]``, and may
    carry the ``body`` merged from them too (``with_body``: kept in memory only, never
    encoded).
    """

    kind: AnswerKind
    endpoint: str
    created_at: float
    ttl_s: float
    body: bytes | None = None
    chunks: Sequence[bytes] | None = None
    size_bytes: int = field(init=False, compare=False)
    # (input, output) tokens of the answer's usage, None where absent: read once here, not
    # on every hit (the time-saved estimate and the metrics need them).
    usage: tuple[int | None, int | None] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind == "json":
            if self.body is None:
                raise ValueError("a json answer needs a body")
            payload_bytes = len(self.body)
        elif self.kind == "stream":
            if self.chunks is None:
                raise ValueError("a stream answer needs chunks")
            payload_bytes = sum(len(chunk) for chunk in self.chunks)
            if self.body is not None:
                payload_bytes += len(self.body)
        else:
            raise ValueError(f"unknown answer kind {self.kind!r}")
        object.__setattr__(
            self, "size_bytes", payload_bytes + len(self.endpoint) + _FIXED_SIZE_BYTES
        )
        object.__setattr__(self, "usage", usage_tokens(self.usage_tail))

    @property
    def usage_tail(self) -> bytes:
        """Where the answer's usage is: the body, else the last event of the stream."""
        if self.body is not None:
            return self.body
        return self.chunks[-1] if self.chunks else b""

    @classmethod
    def from_body(
        cls, body: bytes, *, endpoint: str, ttl_s: float, created_at: float | None = None
    ) -> CachedAnswer:
        """A non-streamed answer created now (unless ``created_at`` is given)."""
        return cls(
            kind="json",
            endpoint=endpoint,
            created_at=time.time() if created_at is None else created_at,
            ttl_s=ttl_s,
            body=body,
        )

    @classmethod
    def from_chunks(
        cls,
        chunks: Sequence[bytes],
        *,
        endpoint: str,
        ttl_s: float,
        created_at: float | None = None,
    ) -> CachedAnswer:
        """A streamed answer created now (unless ``created_at`` is given)."""
        return cls(
            kind="stream",
            endpoint=endpoint,
            created_at=time.time() if created_at is None else created_at,
            ttl_s=ttl_s,
            chunks=chunks,
        )

    def with_body(self, body: bytes) -> CachedAnswer:
        """This stream answer also carrying ``body``, its chunks merged
        (``hasten.cache.replay.chunks_to_body``): a non-stream hit then merges nothing."""
        if self.kind != "stream":
            raise ValueError("only a stream answer is given its merged body")
        return CachedAnswer(
            kind="stream",
            endpoint=self.endpoint,
            created_at=self.created_at,
            ttl_s=self.ttl_s,
            body=body,
            chunks=self.chunks,
        )

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s

    def is_fresh(self, now: float, max_age_s: float | None = None) -> bool:
        """Within its TTL and, when the client sent ``max-age``, younger than that."""
        age_s = now - self.created_at
        if age_s >= self.ttl_s:
            return False
        return max_age_s is None or age_s < max_age_s

    def encode(self) -> bytes:
        """Version byte, small orjson header, then the raw payload bytes unescaped."""
        header: dict[str, object] = {
            "k": self.kind,
            "e": self.endpoint,
            "c": self.created_at,
            "t": self.ttl_s,
        }
        if self.kind == "json":
            assert self.body is not None
            payload: Sequence[bytes] = (self.body,)
        else:
            assert self.chunks is not None
            payload = self.chunks
            header["n"] = [len(chunk) for chunk in payload]
        header_bytes = orjson.dumps(header)
        checksum = zlib.crc32(header_bytes)
        for part in payload:
            checksum = zlib.crc32(part, checksum)
        prefix = _PREFIX.pack(_FORMAT_VERSION, len(header_bytes), checksum)
        return b"".join((prefix, header_bytes, *payload))

    @classmethod
    def decode(cls, data: bytes) -> CachedAnswer:
        """Inverse of :meth:`encode`; raises ``OutdatedCacheEntry`` for an older format and
        ``DamagedCacheEntry`` (both ``ValueError``) for a bad checksum or foreign data."""
        if data[:1] and data[0] in _OUTDATED_VERSIONS:
            raise OutdatedCacheEntry(f"cached answer format {data[0]} has no checksum")
        if len(data) < _PREFIX.size:
            raise DamagedCacheEntry("cached answer is truncated")
        version, header_len, checksum = _PREFIX.unpack_from(data)
        if version != _FORMAT_VERSION:
            raise DamagedCacheEntry(f"unsupported cached answer version {version}")
        if zlib.crc32(memoryview(data)[_PREFIX.size :]) != checksum:
            raise DamagedCacheEntry("cached answer fails its checksum")
        start = _PREFIX.size + header_len
        if start > len(data):
            raise DamagedCacheEntry("cached answer header is truncated")
        try:
            header = orjson.loads(data[_PREFIX.size : start])
            kind, endpoint = header["k"], header["e"]
            created_at, ttl_s = float(header["c"]), float(header["t"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DamagedCacheEntry("cached answer header is damaged") from exc
        if not isinstance(endpoint, str):
            raise DamagedCacheEntry("cached answer header is damaged")
        if kind == "json":
            return cls(
                kind="json",
                endpoint=endpoint,
                created_at=created_at,
                ttl_s=ttl_s,
                body=data[start:],
            )
        lengths = header.get("n")
        if kind != "stream" or not isinstance(lengths, list):
            raise DamagedCacheEntry("cached answer header is damaged")
        return cls(
            kind="stream",
            endpoint=endpoint,
            created_at=created_at,
            ttl_s=ttl_s,
            chunks=_split(data, start, lengths),
        )


def _split(data: bytes, start: int, lengths: list[object]) -> list[bytes]:
    view = memoryview(data)
    chunks: list[bytes] = []
    offset = start
    for length in lengths:
        if not isinstance(length, int) or length < 0:
            raise DamagedCacheEntry("cached answer chunk table is damaged")
        end = offset + length
        chunks.append(bytes(view[offset:end]))
        offset = end
    if offset != len(data):
        raise DamagedCacheEntry("cached answer payload does not match its chunk table")
    return chunks

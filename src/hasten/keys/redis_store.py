"""Virtual keys in the fleet's Redis (``[fleet] redis_url``): every replica sees the same
keys, and a change made through one replica's admin API is the fleet's at once.

Two hashes under the fleet's prefix: ``keys:records`` (id -> checksummed record) and
``keys:digests`` (the hex SHA-256 of an active secret -> id). Each operation is one Lua
script, so a lookup is one round trip and a write is atomic: a new key cannot pass the
``max_keys`` bound, and a replace is a compare and swap on the record's bytes. Calls go
through ``FleetLink``: Redis away, they raise ``KeyStoreUnavailable`` at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from hasten.errors import DamagedKeyRecord, FleetUnavailable, KeyStoreUnavailable
from hasten.fleet.link import FleetLink
from hasten.keys.codec import decode, encode
from hasten.keys.record import KeyRecord

_log = logging.getLogger("hasten.keys")

_FIND = """
local id = redis.call('HGET', KEYS[2], ARGV[1])
if not id then return false end
return {id, redis.call('HGET', KEYS[1], id) or ''}
"""
_ADD = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then return -1 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], ARGV[2], ARGV[1]) end
return 1
"""
_REPLACE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] ~= '' then redis.call('HDEL', KEYS[2], ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], ARGV[5], ARGV[1]) end
return 1
"""


class RedisKeyStore:
    kind = "redis"

    def __init__(self, link: FleetLink) -> None:
        self._link = link
        self._records = link.key("keys", "records")
        self._digests = link.key("keys", "digests")
        self._find = link.client.register_script(_FIND)
        self._add = link.client.register_script(_ADD)
        self._replace = link.client.register_script(_REPLACE)

    async def find(self, digest: bytes) -> KeyRecord | None:
        keys = [self._records, self._digests]
        found = await self._run("keys.find", lambda r: self._find(keys, [digest.hex()], r))
        if not found:
            return None
        key_id, raw = bytes(found[0]).decode(errors="replace"), bytes(found[1])
        record = decode(raw)
        if record.key_id != key_id or record.secret_sha256 != digest or record.is_revoked:
            raise DamagedKeyRecord(f"virtual key {key_id[:40]!r}: index and record disagree")
        return record

    async def get(self, key_id: str) -> KeyRecord | None:
        raw = await self._run("keys.get", lambda r: r.hget(self._records, key_id))
        if raw is None:
            return None
        record = decode(bytes(raw))
        if record.key_id != key_id:
            raise DamagedKeyRecord(f"virtual key {key_id[:40]!r}: stored under another id")
        return record

    async def list_all(self) -> list[KeyRecord]:
        rows: dict[bytes, bytes] = await self._run("keys.list", lambda r: r.hgetall(self._records))
        records = []
        for key_id, raw in rows.items():
            try:
                record = decode(bytes(raw))
                if record.key_id.encode() != key_id:
                    raise DamagedKeyRecord("stored under another id")
            except DamagedKeyRecord as exc:
                _log.warning("virtual keys: %r left out of the list: %s", key_id[:40], exc)
                continue
            records.append(record)
        return sorted(records, key=lambda record: (record.created_s, record.key_id))

    async def add(self, record: KeyRecord, *, max_keys: int) -> bool:
        args: list[str | bytes | int] = [record.key_id, _indexed(record), encode(record), max_keys]
        keys = [self._records, self._digests]
        result = await self._run("keys.add", lambda r: self._add(keys, args, r))
        return int(result) == 1

    async def replace(self, old: KeyRecord, new: KeyRecord) -> bool:
        args: list[str | bytes] = [
            old.key_id,
            encode(old),
            encode(new),
            _indexed(old),
            _indexed(new),
        ]
        keys = [self._records, self._digests]
        result = await self._run("keys.replace", lambda r: self._replace(keys, args, r))
        return int(result) == 1

    async def aclose(self) -> None:
        return None  # the link is the gateway's, closed with it

    async def _run(self, what: str, op: Callable[[Redis], Awaitable[Any]]) -> Any:
        try:
            return await self._link.run(what, op)
        except FleetUnavailable as exc:
            raise KeyStoreUnavailable(f"the key store (Redis) is unavailable: {exc}") from None


def _indexed(record: KeyRecord) -> str:
    """The hex digest the index holds for ``record`` ('' for a revoked key: none)."""
    return "" if record.is_revoked else record.secret_sha256.hex()

"""Stored responses in the fleet's Redis (``[fleet] redis_url``): a response stored through
one replica is found through every other.

A record is one string key (``<prefix>responses:r:<tenant>:<id>``, its checksummed bytes,
written with ``PX`` = its remaining time: Redis drops it when it expires). The total size
bound is kept by one Lua script per write, atomic across replicas: an index of the records
by age (a sorted set) and their sizes (a hash) let it drop the oldest records past
``max_bytes``, and the index entries of records past their age. Calls go through
``FleetLink``: Redis away, a read misses and a write drops at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from hasten.errors import FleetUnavailable
from hasten.fleet.link import FleetLink
from hasten.proxy.validation import off_loop
from hasten.responses.record import DamagedRecord, StoredResponse, decode, encode

_log = logging.getLogger("hasten.responses")

# KEYS: the record, the age index, the sizes, the total. ARGV: value, ttl ms, created ms,
# size, max bytes, the cut-off age (created ms before it: expired), how many to trim a call.
_PUT = """
local function drop(member)
  local size = tonumber(redis.call('HGET', KEYS[3], member) or '0')
  redis.call('HDEL', KEYS[3], member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('DEL', member)
  redis.call('DECRBY', KEYS[4], size)
end
if redis.call('ZSCORE', KEYS[2], KEYS[1]) then drop(KEYS[1]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], ARGV[4])
local total = redis.call('INCRBY', KEYS[4], ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[6], 'LIMIT', 0, ARGV[7])
for _, member in ipairs(expired) do drop(member) end
total = tonumber(redis.call('GET', KEYS[4]) or '0')
local limit = tonumber(ARGV[5])
while total > limit do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then break end
  drop(oldest[1])
  total = tonumber(redis.call('GET', KEYS[4]) or '0')
end
return redis.call('EXISTS', KEYS[1])
"""
_DELETE = """
if not redis.call('ZSCORE', KEYS[2], KEYS[1]) then return redis.call('DEL', KEYS[1]) end
local size = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
redis.call('HDEL', KEYS[3], KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
redis.call('DECRBY', KEYS[4], size)
return redis.call('DEL', KEYS[1])
"""
_TRIM_PER_PUT = 64


class RedisResponseStore:
    kind = "redis"

    def __init__(
        self,
        link: FleetLink,
        *,
        max_bytes: int,
        max_record_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._link = link
        self._clock = clock
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self._index = link.key("responses", "index")
        self._sizes = link.key("responses", "sizes")
        self._total = link.key("responses", "bytes")
        self._put = link.client.register_script(_PUT)
        self._delete = link.client.register_script(_DELETE)
        self.num_damaged = 0

    def _key(self, tenant: str, response_id: str) -> str:
        # Ids and tenants are not free of ':', so each part is length-prefixed.
        return self._link.key("responses", "r", f"{len(tenant)}.{tenant}", response_id)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = self._key(tenant, response_id)
        try:
            value = await self._link.run("responses.get", lambda r: r.get(key))
        except FleetUnavailable:
            return None
        if not isinstance(value, bytes):
            return None
        try:
            # A long record is checked and parsed on the parser thread, as a large request
            # body is: the event loop keeps serving other clients meanwhile.
            record = await off_loop(len(value), lambda: decode(value))
        except DamagedRecord as exc:
            self.num_damaged += 1
            _log.warning("stored responses in Redis: dropped a damaged record (%s)", exc)
            await self.delete(tenant, response_id)
            return None
        if (record.tenant, record.response_id) != (tenant, response_id):
            return None
        return record

    async def put(self, record: StoredResponse) -> bool:
        value = encode(record)
        if len(value) > self.max_record_bytes:
            return False
        now_ms = int(self._clock() * 1000)
        ttl_ms = int(record.expires_s * 1000) - now_ms
        if ttl_ms <= 0:
            return False
        key = self._key(record.tenant, record.response_id)
        created_ms = int(record.created_s * 1000)
        # Records live as long as this one: those created longer ago are gone from Redis.
        cutoff_ms = now_ms - int((record.expires_s - record.created_s) * 1000)
        args: list[Any] = [
            value,
            ttl_ms,
            created_ms,
            len(value),
            self.max_bytes,
            cutoff_ms,
            _TRIM_PER_PUT,
        ]
        keys = [key, self._index, self._sizes, self._total]
        try:
            kept = await self._link.run(
                "responses.put", lambda r: self._put(keys=keys, args=args, client=r)
            )
        except FleetUnavailable:
            return False
        return bool(kept)

    async def delete(self, tenant: str, response_id: str) -> bool:
        keys = [self._key(tenant, response_id), self._index, self._sizes, self._total]
        try:
            deleted = await self._link.run(
                "responses.delete", lambda r: self._delete(keys=keys, args=[], client=r)
            )
        except FleetUnavailable:
            return False
        return bool(deleted)

    async def aclose(self) -> None:
        return None  # the link is the fleet's, closed with it

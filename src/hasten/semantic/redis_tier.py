"""Redis as the shared tier of the semantic cache: every replica sees every replica's entries.

Layout under ``<namespace>`` (the namespace names the embedder, so replicas running another
model never read these vectors):

- ``<ns>next_id``: a counter (INCR) handing out entry ids that are unique across replicas, so
  an id in ``x-hasten-semantic-entry`` means the same entry on every replica;
- ``<ns>e:<id>``: one hash per entry (partition key, tenant, model, text, float16 vector,
  answer key, created/expiry times),
  expiring in Redis when the entry does (PEXPIREAT);
- ``<ns>events``: a stream of ``insert <id>`` and ``delete <filter>`` events, capped at
  ``max_events`` (``XADD MAXLEN ~``).

Each replica's SQLite file and index are its local copy, kept in step by ``replica``'s
``SharedReplica`` (following, rebuilds, invalidations waiting for Redis). Redis down never
fails a request: lookups use the local copy and an insert gets a local-only id (from
``LOCAL_ID_BASE`` up, never published). What is not shared: evictions (each replica
enforces its own limits), hit counts, and inserts made while Redis was down.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from redis.exceptions import RedisError

from hasten.semantic.records import Row
from hasten.storage.redis import redis_client

_LOG = logging.getLogger("hasten.semantic")
FAILURES = (RedisError, OSError, TimeoutError)
# Ids handed out while Redis is unreachable start here: far above any shared id, small
# enough that sums of ids (partition digests) stay within SQLite's 64-bit integers.
LOCAL_ID_BASE = 1 << 40
_SCAN_BATCH = 500


@dataclass(frozen=True, slots=True)
class SharedEntry:
    """One semantic-cache entry as stored in Redis: its id, its row and its vector."""

    entry_id: int
    row: Row
    vector_f16: bytes


@dataclass(frozen=True, slots=True)
class DeleteEvent:
    """Removes local entries matching every given condition, as ``invalidate`` does."""

    where: dict[str, Any]
    created_before: float | None


Event = SharedEntry | DeleteEvent | None  # None: an insert whose hash is already gone


# How each ``Row`` field is read back from an entry hash, by its annotation.
_READERS: dict[str, Callable[[bytes], Any]] = {"str": bytes.decode, "float": float}
_ROW_READERS = {f.name: _READERS[str(f.type)] for f in dataclasses.fields(Row)}


def encode_entry(entry: SharedEntry) -> dict[str, bytes | str | float | int]:
    """The entry's hash: its row's fields (redis-py writes a number as its ``repr``, which
    reads back exactly) and its vector."""
    return {**dataclasses.asdict(entry.row), "vector": entry.vector_f16}


def decode_entry(entry_id: int, hashed: Mapping[bytes, bytes]) -> SharedEntry | None:
    """None for a missing (expired, deleted) or malformed hash. Fields that are not the
    row's are ignored (``answer_class``, written by replicas before issue 40)."""
    try:
        row = Row(**{name: read(hashed[name.encode()]) for name, read in _ROW_READERS.items()})
        return SharedEntry(entry_id, row, bytes(hashed[b"vector"]))
    except (KeyError, TypeError, ValueError, UnicodeDecodeError):
        return None


def _insert_id(fields: Mapping[bytes, bytes]) -> int | None:
    if fields.get(b"op") != b"insert" or not fields.get(b"id", b"").isdigit():
        return None
    return int(fields[b"id"])


def _delete_event(fields: Mapping[bytes, bytes]) -> DeleteEvent | None:
    if fields.get(b"op") != b"delete":
        return None
    try:
        parsed = orjson.loads(fields[b"filter"])
        where = {k: parsed["where"].get(k) for k in ("entry_id", "tenant", "model")}
        return DeleteEvent(where, parsed["created_before"])
    except (KeyError, TypeError, AttributeError, orjson.JSONDecodeError):
        return None


def is_before(first: bytes, second: bytes) -> bool:
    """Stream id order ("<ms>-<seq>")."""
    one, two = first.split(b"-"), second.split(b"-")
    return (int(one[0]), int(one[1])) < (int(two[0]), int(two[1]))


class RedisTier:
    """The Redis side. Writes never raise (False when dropped); reads raise ``FAILURES``."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        max_events: int = 100_000,
        op_timeout_s: float = 0.25,
        block_ms: int = 500,
        retry_backoff_s: float = 1.0,
    ) -> None:
        self.namespace = namespace
        self.block_ms = block_ms
        self.retry_backoff_s = retry_backoff_s
        self._max_events = max_events
        # One immediate retry, on a dropped connection only (as the exact cache's Redis
        # store): after a Redis restart every pooled connection is dead, and the first use
        # of each would otherwise cost an insert its shared id. A timeout is not retried: a
        # local-only entry is cheaper than waiting twice on a struggling Redis.
        self._client = redis_client(url, connect_timeout_s=op_timeout_s, op_timeout_s=op_timeout_s)
        # The follower's blocking reads need a socket timeout longer than the block.
        self._reader = redis_client(
            url, connect_timeout_s=op_timeout_s, op_timeout_s=op_timeout_s + block_ms / 1000
        )
        self._retry_at = 0.0  # time.monotonic() before which writers leave Redis alone

    @property
    def events_key(self) -> str:
        return self.namespace + "events"

    def entry_key(self, entry_id: int) -> str:
        return f"{self.namespace}e:{entry_id}"

    async def next_id(self) -> int | None:
        """A cluster-wide entry id, or None if Redis is unreachable."""
        if time.monotonic() < self._retry_at:
            return None
        try:
            return int(await self._client.incr(self.namespace + "next_id"))
        except FAILURES as exc:
            self._on_failure(exc)
            return None

    async def publish_insert(self, entry: SharedEntry) -> bool:
        async def write(pipe: Any) -> None:
            pipe.hset(self.entry_key(entry.entry_id), mapping=encode_entry(entry))
            pipe.pexpireat(self.entry_key(entry.entry_id), int(entry.row.expires_at * 1000))
            pipe.xadd(
                self.events_key,
                {"op": "insert", "id": str(entry.entry_id)},
                maxlen=self._max_events,
                approximate=True,
            )

        return await self._transaction(write)

    async def publish_delete(self, event: DeleteEvent, entry_ids: Sequence[int]) -> bool:
        payload = orjson.dumps({"where": event.where, "created_before": event.created_before})

        async def write(pipe: Any) -> None:
            for start in range(0, len(entry_ids), _SCAN_BATCH):
                pipe.delete(*(self.entry_key(i) for i in entry_ids[start : start + _SCAN_BATCH]))
            pipe.xadd(
                self.events_key,
                {"op": "delete", "filter": payload},
                maxlen=self._max_events,
                approximate=True,
            )

        return await self._transaction(write)

    async def _transaction(self, write: Callable[[Any], Awaitable[None]]) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                await write(pipe)
                await pipe.execute()
        except FAILURES as exc:
            self._on_failure(exc)
            return False
        return True

    def _on_failure(self, exc: BaseException) -> None:
        if self._retry_at == 0.0 or time.monotonic() >= self._retry_at:
            _LOG.warning("semantic shared tier: Redis unavailable (%s); local only", exc)
        self._retry_at = time.monotonic() + self.retry_backoff_s

    # --- follower side: these raise FAILURES ---

    async def stream_bounds(self) -> tuple[bytes | None, bytes]:
        """(first id still in the stream or None if empty, last id ever added or b"0-0")."""
        first = cast(list[Any], await self._reader.xrange(self.events_key, count=1))
        last = cast(list[Any], await self._reader.xrevrange(self.events_key, count=1))
        return (bytes(first[0][0]) if first else None), (bytes(last[0][0]) if last else b"0-0")

    async def read(self, after: bytes, count: int = 512) -> list[tuple[bytes, Event]]:
        """Events after stream id ``after`` (blocks up to ``block_ms``): insert entries
        (None if their hash is already gone) and delete filters."""
        streams: dict[Any, Any] = {self.events_key: after}
        reply = cast(list[Any], await self._reader.xread(streams, count=count, block=self.block_ms))
        if not reply:
            return []
        raw = cast(list[tuple[bytes, Mapping[bytes, bytes]]], reply[0][1])
        insert_ids = [i for _, f in raw if (i := _insert_id(f)) is not None]
        entries = dict(zip(insert_ids, await self.load(insert_ids), strict=True))
        events: list[tuple[bytes, Event]] = []
        for stream_id, fields in raw:
            entry_id = _insert_id(fields)
            # A malformed event is skipped (None), never retried: it would stall following.
            event = entries[entry_id] if entry_id is not None else _delete_event(fields)
            events.append((stream_id, event))
        return events

    async def load(self, entry_ids: Sequence[int]) -> list[SharedEntry | None]:
        async with self._reader.pipeline(transaction=False) as pipe:
            for entry_id in entry_ids:
                pipe.hgetall(self.entry_key(entry_id))
            hashes = await pipe.execute()
        return [decode_entry(i, h) for i, h in zip(entry_ids, hashes, strict=True)]

    async def scan_ids(self) -> list[int]:
        """Ids of every entry hash in Redis (used to rebuild a replica's copy)."""
        prefix = self.entry_key(0)[:-1]
        ids: list[int] = []
        async for key in self._reader.scan_iter(match=prefix + "*", count=_SCAN_BATCH):
            suffix = key[len(prefix) :]
            if suffix.isdigit():
                ids.append(int(suffix))
        return ids

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._reader.aclose()

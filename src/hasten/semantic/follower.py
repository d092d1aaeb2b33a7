"""Keeps a replica's local copy of the semantic cache in step with the shared Redis tier.

A background task: resume from the saved stream position (or rebuild from the entry
hashes when there is none or it was trimmed off the stream), then apply events as a short
blocking XREAD returns them. Any failure means "Redis is away": wait, then resume again.
Invalidations made here while Redis was away are published first, before any rebuild could
bring their entries back. See ``redis_tier`` for the data layout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from hasten.semantic.redis_tier import FAILURES, DeleteEvent, Event, RedisTier, is_before

_LOG = logging.getLogger("hasten.semantic")
_REBUILD_BATCH = 500


class LocalCopy(Protocol):
    """What the follower needs of the replica's own store."""

    async def load_cursor(self) -> bytes | None: ...

    async def save_cursor(self, cursor: bytes) -> None: ...

    async def apply(self, events: Sequence[Event]) -> None: ...

    async def keep_only(self, shared_ids: set[int]) -> None:
        """Drops shared entries (ids below ``LOCAL_ID_BASE``) that Redis no longer holds."""

    @property
    def has_pending_deletes(self) -> bool: ...

    async def pending_deletes(self) -> list[tuple[DeleteEvent, list[int]]]:
        """Invalidations made while Redis was away, oldest first."""

    async def drop_pending_deletes(self, num_published: int) -> None:
        """The oldest ``num_published`` pending invalidations are in Redis now."""


def needs_rebuild(saved: bytes | None, first: bytes | None, last: bytes) -> bool:
    """Whether events after ``saved`` may be missing from the stream (pure)."""
    if saved is None:
        return True
    if first is not None and is_before(saved, first):
        return True  # trimmed past our position
    return is_before(last, saved)  # a position from another (or a flushed) Redis


class Follower:
    """Applies the shared stream to a local copy until cancelled."""

    def __init__(self, shared: RedisTier, local: LocalCopy) -> None:
        self.shared = shared
        self.local = local
        self.num_applied = 0
        self.num_rebuilds = 0
        self.num_failures = 0
        self.num_replayed_deletes = 0
        self.is_connected = False
        self._is_stopping = False

    def stop(self) -> None:
        """Ends ``run`` at its next step. Cancelling alone is not enough: a cancelled blocking
        read may surface inside the Redis client as a connection error (or not at all)."""
        self._is_stopping = True

    async def run(self) -> None:
        cursor: bytes | None = None
        while not self._is_stopping:
            try:
                if self.local.has_pending_deletes:
                    await self._publish_pending()
                if cursor is None:
                    cursor = await self._resume()
                    self.is_connected = True
                events = await self.shared.read(cursor)
                if events:
                    await self.local.apply([event for _, event in events])
                    cursor = events[-1][0]
                    await self.local.save_cursor(cursor)
                    self.num_applied += len(events)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away or a bad event: never stop following
                if self._is_stopping:
                    return
                self._on_failure(exc)
                cursor = None
                await asyncio.sleep(self.shared.retry_backoff_s)

    def _on_failure(self, exc: Exception) -> None:
        self.num_failures += 1
        if self.is_connected or self.num_failures == 1:
            is_expected = isinstance(exc, FAILURES)
            _LOG.warning(
                "semantic shared tier: following stopped (%s); retrying",
                exc,
                exc_info=not is_expected,
            )
        self.is_connected = False

    async def _publish_pending(self) -> None:
        num_published = 0
        try:
            for event, entry_ids in await self.local.pending_deletes():
                if not await self.shared.publish_delete(event, entry_ids):
                    raise ConnectionError("pending invalidations not published yet")
                num_published += 1
        finally:  # one write for the whole batch, even when it stopped part-way
            if num_published:
                await self.local.drop_pending_deletes(num_published)
                self.num_replayed_deletes += num_published

    async def _resume(self) -> bytes:
        saved = await self.local.load_cursor()
        first, last = await self.shared.stream_bounds()
        if not needs_rebuild(saved, first, last) and saved is not None:
            return saved
        # Take the position first: events racing the scan are applied again (idempotent).
        ids = await self.shared.scan_ids()
        for start in range(0, len(ids), _REBUILD_BATCH):
            await self.local.apply(await self.shared.load(ids[start : start + _REBUILD_BATCH]))
        await self.local.keep_only(set(ids))
        await self.local.save_cursor(last)
        self.num_rebuilds += 1
        return last

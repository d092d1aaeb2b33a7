"""Shared routing state: each replica's pools kept in step with the fleet's through Redis.

Every ``sync_interval_s``, and at once after a local breaker trip, one background task makes
one pipelined round trip that:
- publishes this replica's news since the last sync (each pool's ``Outbox``: its own
  TTFT, censored and time-per-token observations and its breaker trips) as one entry of the
  fleet's news stream (XADD, trimmed, expiring), and each trip also as a key whose PX is the
  remaining cooldown, so a replica starting later still sees it (read once, at its start);
- reads the other replicas' entries since the last one it read and folds them in
  (``DeploymentPool.merge_remote``); its own entries are skipped and what was folded in is
  never published again, so no replica's data is counted twice;
- adds its hedge-budget counts to the fleet's per-bucket counters (HINCRBY, expiring with
  the window), reads the window's totals back and counts the live replicas (a sorted set of
  heartbeats), for ``HedgeBudget.apply_fleet``.

Nothing on a request's path waits for Redis: requests read only the local pools. Clocks:
routing runs on this process's monotonic clock; what crosses processes is on Redis's clock
(TIME, in the same round trip), and each replica keeps its offset from it (the round trip's
midpoint), so no two replicas' wall clocks are ever compared. Redis away: the pools decide
alone (``apply_fleet(None)``) and a later tick, after ``FleetLink``'s backoff, tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from hasten.errors import FleetUnavailable, MalformedNews
from hasten.fleet.link import FleetLink
from hasten.fleet.news import decode, encode
from hasten.routing.budget import NUM_BUCKETS, FleetCounts
from hasten.routing.outbox import Outbox, Summary, Trip
from hasten.routing.pool import DeploymentPool

_log = logging.getLogger("hasten.fleet")

STREAM_MAX_LEN = 10_000  # entries kept (approximately): ~30 s of a busy 30-replica fleet
STREAM_TTL_S = 300.0  # the stream disappears once the whole fleet has stopped
BOOTSTRAP_S = 10.0  # a replica starting reads this much of the fleet's past news
MAX_READ_ENTRIES = 100  # per tick; a replica catching up takes a few ticks
MIN_REPLICA_TTL_S = 1.0  # a replica silent this long (or 10 ticks) no longer counts
MAX_VIEW_AGE_TICKS = 5  # the fleet's budget totals are trusted this many ticks (or a bucket)


class RoutingSync:
    """The background task sharing this replica's routing pools with the fleet."""

    def __init__(
        self,
        link: FleetLink,
        pools: Mapping[str, DeploymentPool],
        *,
        replica_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._link = link
        self._pools = dict(pools)  # by route name, the same on every replica
        self.replica_id = replica_id or os.urandom(6).hex()
        self._clock = clock
        self._interval_s = link.config.sync_interval_s
        self._replica_ttl_s = max(MIN_REPLICA_TTL_S, 10 * self._interval_s)
        self._wake = asyncio.Event()
        self._outboxes = {route: Outbox(self._wake.set) for route in self._pools}
        for route, pool in self._pools.items():
            pool.outbox = self._outboxes[route]
        self._offset_s: float | None = None  # Redis's clock minus ours
        self._last_id = "0-0"  # the last news entry read
        self._task: asyncio.Task[None] | None = None
        self.synced_s: float | None = None
        self.num_replicas = 1
        self.num_syncs = self.num_failures = self.num_published = 0
        self.num_remote_entries = self.num_remote_trips = self.num_malformed = 0
        self.num_published_trips = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pool in self._pools.values():
            pool.outbox = None
            pool.budget.apply_fleet(None)

    async def _run(self) -> None:
        is_failing = False
        while True:
            try:
                await self.sync_once()
                is_failing = False
            except Exception:  # the task must outlive any surprise; the next tick retries
                if not is_failing:  # once per run of failures, not ten times a second
                    _log.exception("fleet routing sync failed")
                is_failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()

    async def sync_once(self) -> bool:
        """One exchange with the fleet; False when Redis is away (the pools then decide
        alone, and keep their news for the first tick after it is back)."""
        if not self._link.is_up:
            self.num_failures += 1
            for pool in self._pools.values():
                pool.budget.apply_fleet(None)
            return False
        try:
            if self._offset_s is None:
                await self._bootstrap()
            await self._exchange()
        except FleetUnavailable:
            self.num_failures += 1
            for pool in self._pools.values():
                pool.budget.apply_fleet(None)
            return False
        self.num_syncs += 1
        self.synced_s = self._clock()
        return True

    # --- the clock and a late start -------------------------------------------------------

    def _set_offset(self, redis_time: Any, sent_s: float, received_s: float) -> float:
        seconds, micros = redis_time
        redis_s = int(seconds) + int(micros) / 1e6
        self._offset_s = redis_s - (sent_s + received_s) / 2.0
        return redis_s

    async def _bootstrap(self) -> None:
        """The offset, where to start reading the news, and the trips still cooling down."""
        sent_s = self._clock()
        redis_time = await self._link.run("routing clock", lambda r: r.time())
        redis_s = self._set_offset(redis_time, sent_s, self._clock())
        self._last_id = f"{max(0, int((redis_s - BOOTSTRAP_S) * 1000))}-0"
        names = [(route, name) for route, pool in self._pools.items() for name in pool.deployments]
        pipe = self._link.client.pipeline(transaction=False)
        for route, name in names:
            pipe.get(self._trip_key(route, name))
            pipe.pttl(self._trip_key(route, name))
        replies = await self._link.run("routing trips", lambda r: pipe.execute())
        now_s = self._clock()
        for (route, name), value, ttl_ms in zip(names, replies[::2], replies[1::2], strict=True):
            if value is None or not isinstance(ttl_ms, int) or ttl_ms <= 0:
                continue
            try:
                data = orjson.loads(value)
                trip = Trip(name, now_s + ttl_ms / 1000.0, int(data["n"]), str(data["r"]))
            except (orjson.JSONDecodeError, TypeError, ValueError, KeyError):
                self.num_malformed += 1
                continue
            self.num_remote_trips += self._pools[route].merge_remote(Summary(trips=(trip,)), now_s)

    # --- one tick -------------------------------------------------------------------------

    async def _exchange(self) -> None:
        offset_s = self._offset_s
        assert offset_s is not None
        now_s = self._clock()
        redis_s = now_s + offset_s  # Redis's clock now, as far as this replica can tell
        exported = {route: outbox.drain() for route, outbox in self._outboxes.items()}
        news = {route: s for route, s in exported.items() if not s.is_empty}
        hedging = {r: p for r, p in self._pools.items() if p.routing.hedge.is_enabled}
        pipe = self._link.client.pipeline(transaction=False)
        pipe.time()
        num_published = self._publish(pipe, news, offset_s) if news else 0
        self._heartbeat(pipe, redis_s)
        num_writes = [self._add_counts(pipe, r, p, redis_s) for r, p in hedging.items()]
        pipe.xread({self._news_key(): self._last_id}, count=MAX_READ_ENTRIES)
        sent_s = self._clock()
        try:
            replies = await self._link.run("routing sync", lambda r: pipe.execute())
        except FleetUnavailable:
            for route, summary in exported.items():
                self._outboxes[route].restore(summary)  # published at the next good tick
            raise
        self._set_offset(replies[0], sent_s, self._clock())
        if news:
            self.num_published += 1
            self.num_published_trips += sum(len(summary.trips) for summary in news.values())
        cursor = 1 + num_published
        self.num_replicas = max(1, int(replies[cursor + 2]))  # zadd, zremrangebyscore, zcard
        cursor += 4
        for pool, num_written in zip(hedging.values(), num_writes, strict=True):
            cursor += num_written
            pool.budget.apply_fleet(self._fleet_counts(replies[cursor : cursor + NUM_BUCKETS]))
            cursor += NUM_BUCKETS
        await self._merge(replies[cursor])

    def _publish(self, pipe: Any, news: dict[str, Summary], offset_s: float) -> int:
        """Queues the news entry and the trip keys; returns how many commands it queued."""
        stream = self._news_key()
        pipe.xadd(
            stream,
            {"r": self.replica_id, "p": encode(news, offset_s)},
            maxlen=STREAM_MAX_LEN,
            approximate=True,
        )
        pipe.pexpire(stream, int(STREAM_TTL_S * 1000))
        for route, summary in news.items():
            for trip in summary.trips:
                # At least 1 ms: a key per trip keeps the reply layout fixed.
                ttl_ms = max(1, int((trip.reopen_at_s - self._clock()) * 1000))
                value = orjson.dumps({"n": trip.num_trips, "r": trip.reason, "by": self.replica_id})
                pipe.set(self._trip_key(route, trip.deployment), value, px=ttl_ms)
        return 2 + sum(len(summary.trips) for summary in news.values())

    def _heartbeat(self, pipe: Any, redis_s: float) -> None:
        key = self._link.key("routing", "replicas")
        redis_ms = int(redis_s * 1000)
        pipe.zadd(key, {self.replica_id: redis_ms})
        pipe.zremrangebyscore(key, "-inf", redis_ms - int(self._replica_ttl_s * 1000))
        pipe.zcard(key)
        pipe.pexpire(key, int(self._replica_ttl_s * 1000) * 10)

    def _add_counts(self, pipe: Any, route: str, pool: DeploymentPool, redis_s: float) -> int:
        """Queues this replica's counts (when it has any) and the window's reads; returns
        how many writes it queued before the reads."""
        num_requests, num_hedges = pool.budget.take_counts()
        window_s = pool.routing.hedge.budget_window_s
        bucket_s = window_s / NUM_BUCKETS
        epoch = math.floor(redis_s / bucket_s)
        num_writes = 0
        if num_requests or num_hedges:
            key = self._budget_key(route, epoch)
            pipe.hincrby(key, "r", num_requests)
            pipe.hincrby(key, "h", num_hedges)
            pipe.pexpire(key, int((window_s + bucket_s) * 1000))
            num_writes = 3
        for past in range(epoch - NUM_BUCKETS + 1, epoch + 1):
            pipe.hmget(self._budget_key(route, past), "r", "h")
        return num_writes

    def _fleet_counts(self, totals: list[Any]) -> FleetCounts:
        num_requests = sum(int(r or 0) for r, _ in totals)
        num_hedges = sum(int(h or 0) for _, h in totals)
        max_age_s = MAX_VIEW_AGE_TICKS * self._interval_s
        return FleetCounts(num_requests, num_hedges, self.num_replicas, self._clock(), max_age_s)

    async def _merge(self, reply: Any) -> None:
        """Folds in the other replicas' entries from an XREAD reply (RESP2 or RESP3),
        yielding to the event loop after each (at most ``MAX_PENDING`` observations), so a
        replica catching up never holds requests back for long."""
        streams = reply.items() if isinstance(reply, dict) else (reply or [])
        offset_s = self._offset_s
        assert offset_s is not None
        for _, entries in streams:
            for entry_id, fields in entries:
                self._last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                if fields.get(b"r", b"").decode(errors="replace") == self.replica_id:
                    continue
                try:
                    summaries = decode(fields.get(b"p", b""), -offset_s)
                except MalformedNews:
                    self.num_malformed += 1
                    continue
                self.num_remote_entries += 1
                now_s = self._clock()
                for route, summary in summaries.items():
                    pool = self._pools.get(route)
                    if pool is not None:
                        self.num_remote_trips += pool.merge_remote(summary, now_s)
                await asyncio.sleep(0)

    # --- keys and the admin view ----------------------------------------------------------

    def _news_key(self) -> str:
        return self._link.key("routing", "news")

    def _trip_key(self, route: str, deployment: str) -> str:
        return self._link.key("routing", "trip", route, deployment)

    def _budget_key(self, route: str, epoch: int) -> str:
        return self._link.key("routing", "budget", route, str(epoch))

    def snapshot(self) -> dict[str, object]:
        """The fleet part of ``GET /admin/routing``."""
        synced_s = self.synced_s
        return {
            "replica": self.replica_id,
            "redis_up": self._link.is_up,
            "replicas_seen": self.num_replicas,
            "last_sync_age_s": None if synced_s is None else round(self._clock() - synced_s, 3),
            "syncs": self.num_syncs,
            "sync_failures": self.num_failures,
            "published_entries": self.num_published,
            "published_trips": self.num_published_trips,
            "remote_entries": self.num_remote_entries,
            "remote_observations": sum(p.num_remote_observations for p in self._pools.values()),
            "remote_trips": self.num_remote_trips,
            "malformed_entries": self.num_malformed,
        }

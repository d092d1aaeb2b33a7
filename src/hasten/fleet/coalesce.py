"""Coalescing across replicas: one upstream call for the fleet, relayed through Redis.

A replica whose local flight would call upstream first takes the flight's lease (SET NX
PX, one round trip; its value a fresh token). The winner leads: it calls upstream as a
single gateway does, while a background writer reads its flight like one more waiter and
appends what is new to a Redis stream, one script call per batch (never a round trip per
chunk on the clients' path; it waits a moment after each change, so the flight's own
clients go first), renewing the lease every ``lease_s / 3``. Each write
is fenced: the script appends only while the lease holds the writer's token (or lapsed with
nobody taking it: then the writer takes it back), so a leader that lost its lease to another
replica cannot corrupt what followers read.

A replica that finds the lease held follows: it reads the stream from its first entry
(XREAD BLOCK for at most ``lease_s / 3``, on connections of its own) into its own flight,
so its local clients and late joiners get the answer from the start, then live. When the
lease lapses without an end entry (the leader died, or all its clients left), one follower
takes the lease and calls upstream itself; its answer is spliced after what its clients
already got (``hasten.proxy.splice.Splice``), or ends in a clean error if the text differs.
Redis away, before or during: the replica calls upstream itself, spliced the same way. No
client waits much longer than a lease on a dead leader.

Stored: the leader stores as a single gateway does (every tier); a follower keeps a copy
in its L1 only, since the leader's write already reached the shared tier and a second
write would be the same bytes. A follower that took over stores like a leader: its answer
came from its own upstream call and was checked against what was sent.

Keys: ``<prefix>flight:<digest>`` is the lease; the stream is ``<lease>:<token>``, one per
lease holder, so a stale answer from an earlier flight is never read as this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import hiredis
from redis.asyncio import Redis

from hasten.errors import FleetUnavailable, HastenError, UpstreamError
from hasten.fleet import relay
from hasten.fleet.link import FAILURES, FleetLink
from hasten.fleet.resp import LuaScript, error_of
from hasten.proxy.flight import Flight
from hasten.proxy.ports import EarlyAsk, FleetJob

_log = logging.getLogger("hasten.fleet")

# A lease that lapsed while nobody took it (a stalled loop missed a renewal) is taken back;
# one another replica holds is not touched.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
# ARGV: token, max chunks, stream ttl ms, final ('' | 'done' | 'drop'), lease ms, then
# (kind, seq, data, usage) per entry. 'done' leaves a marker for a lease, so a request that
# arrives before the leader's cache write lands still reads the finished stream.
_APPEND = """
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[5])
elseif holder ~= ARGV[1] then
  return 0
end
for i = 6, #ARGV, 4 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*',
             'k', ARGV[i], 'n', ARGV[i + 1], 'd', ARGV[i + 2], 'u', ARGV[i + 3])
end
if #ARGV >= 6 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
if ARGV[4] == 'done' then
  redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[5])
elseif ARGV[4] == 'drop' then
  redis.call('DEL', KEYS[1])
end
return 1
"""
_DONE_PREFIX = "done:"
_FLUSH_DELAY_S = 0.002
_READ_COUNT = 512
# A follower switches leaders at most this often before it calls upstream itself.
_MAX_HANDOVERS = 3
_MAX_LEASE_TRIES = 3  # SET NX lost, then the lease lapsed before the GET: race again


def lease_key(link: FleetLink, flight_key: str) -> str:
    """The lease of one flight; a digest, so no request text reaches a Redis key name."""
    return link.key("flight", hashlib.sha256(flight_key.encode()).hexdigest()[:32])


class _Outcome(enum.Enum):
    FINISHED = "finished"  # the flight got its end
    LOST = "lost"  # the lease lapsed or moved without an end entry
    AWAY = "away"  # Redis failed
    GAP = "gap"  # the stream lost entries (trimmed, expired): it cannot be followed
    RELEASED = "released"  # given back before any upstream call: nothing ran


class EarlyLease:
    """A flight's lease asked for at the request's L1 miss (``ask``, the cache's callback),
    before the request knows it will call upstream: the round trip then overlaps the rest
    of the lookup (L2, semantic) and the flight's setup. The flight's pump takes it over; a
    request that did not need it (a hit, a local flight to join, a refusal) gives it back
    (``FleetCoalescer.release``)."""

    __slots__ = ("_coalescer", "flight_key", "is_used", "lease", "reply", "token")

    def __init__(self, coalescer: FleetCoalescer, flight_key: str) -> None:
        self._coalescer = coalescer
        self.flight_key = flight_key
        self.lease = self.token = ""
        # The SET NX's reply, a future rather than a task: most often the reply is in by
        # the time the pump needs it, and reading a done future costs no turn of the loop.
        self.reply: asyncio.Future[Any] | None = None
        self.is_used = False

    def ask(self) -> None:
        """Sends the lease's ``SET NX`` now (not while Redis is away, nor before the lean
        connection is up: the pump then takes the lease itself, or runs locally)."""
        coalescer = self._coalescer
        if self.reply is None and not self.is_used and coalescer._link.is_up:
            self.lease = lease_key(coalescer._link, self.flight_key)
            self.token = coalescer.new_token()
            command = coalescer._lease_command(self.lease, self.token)
            self.reply = coalescer._link.fast.send_now(*command)


class FleetCoalescer:
    """Runs flights fleet-wide; one per gateway, holding its scripts and writer tasks."""

    def __init__(self, link: FleetLink) -> None:
        self._link = link
        config = link.config
        self._lease_ms = max(1, round(config.lease_s * 1000))
        self._renew_s = config.lease_s / 3
        block_s = config.lease_s / 3
        self._block_ms = max(1, round(block_s * 1000))
        # Blocking reads get their own connections, with a socket timeout past the block:
        # on the shared client's op timeout a quiet wait would read as Redis failing.
        assert config.redis_url is not None
        self._reader: Redis = Redis.from_url(
            config.redis_url,
            socket_connect_timeout=config.connect_timeout_s,
            socket_timeout=block_s + config.op_timeout_s,
        )
        self._ttl_ms = max(1, round(config.stream_ttl_s * 1000))
        self._max_chunks = config.stream_max_chunks
        self._renew, self._append = LuaScript(_RENEW), LuaScript(_APPEND)
        self._writers: set[asyncio.Task[None]] = set()
        # A lease's token names its holder for fencing; unique per process and flight, it
        # needs no fresh randomness each time (a syscall on the miss path).
        self._token_prefix = secrets.token_hex(6)
        self._num_tokens = itertools.count()

    @property
    def is_on(self) -> bool:
        return True

    def new_token(self) -> str:
        """A token no other lease holder uses: this process's random prefix, a counter."""
        return f"{self._token_prefix}{next(self._num_tokens):x}"

    def early(self, flight_key: str) -> EarlyLease:
        """An early lease for ``flight_key``, not asked for yet (no I/O)."""
        return EarlyLease(self, flight_key)

    def release(self, early: EarlyAsk) -> None:
        """Gives back an early lease nobody used (a no-op once a pump took it over): if it
        was won, it is dropped after the answer, so other replicas stop waiting on it."""
        assert isinstance(early, EarlyLease)
        if early.is_used:
            return
        early.is_used = True
        reply, lease, token = early.reply, early.lease, early.token
        if reply is not None:
            reply.add_done_callback(lambda done: self._give_back(lease, token, done))

    async def pump(self, flight: Flight, job: FleetJob, early: EarlyAsk | None = None) -> None:
        """Fills ``flight``: leading the fleet's call, following it, or locally."""
        assert early is None or isinstance(early, EarlyLease)
        reply = None if early is None or early.is_used else early.reply
        if early is not None and reply is not None and early.flight_key == job.flight_key:
            early.is_used, lease = True, early.lease
            try:
                taken = await self._take(lease, early.token, reply)
            except asyncio.CancelledError:
                early.is_used = False
                self.release(early)
                raise
        else:
            lease = lease_key(self._link, job.flight_key)
            taken = await self._take(lease)
        if taken is None:
            await job.pump(flight)
            return
        token, holder = taken
        if holder == token:
            await self._lead(flight, job.pump, lease, token)
            return
        await self._follow(flight, job, lease, holder)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Waits for the writers to publish their flights' ends (shutdown, tests); bounded."""
        if self._writers:
            await asyncio.wait(set(self._writers), timeout=timeout_s)
        for writer in list(self._writers):
            writer.cancel()

    async def aclose(self) -> None:
        """Drains the writers, then closes the blocking readers' connections."""
        await self.drain()
        with contextlib.suppress(*FAILURES):
            await self._reader.aclose()

    def _lease_command(self, lease: str, token: str) -> tuple[str, str, str, str, str, int]:
        return ("SET", lease, token, "NX", "PX", self._lease_ms)

    async def _take(
        self, lease: str, token: str | None = None, sent: asyncio.Future[Any] | None = None
    ) -> tuple[str, str] | None:
        """(our token, the lease's holder); None when Redis is away. ``sent``: the reply of
        a ``SET NX`` with ``token`` already on its way (``EarlyLease.ask``).

        A plain SET NX PX: the leader's one round trip before its upstream call. Only a
        replica that lost the race pays a second one, to learn whom it follows.
        """
        token = token or self.new_token()
        fast = self._link.fast  # the miss path's one round trip: on the lean connection
        for _ in range(_MAX_LEASE_TRIES):
            try:
                if sent is not None:
                    is_taken, sent = await self._sent_reply(sent), None
                else:
                    is_taken = await self._link.run(
                        "flight lease", lambda _: fast.call(*self._lease_command(lease, token))
                    )
                if is_taken is not None:
                    return token, token
                holder = await self._link.run("flight lease", lambda _: fast.call("GET", lease))
            except FleetUnavailable:
                return None
            if holder is not None:  # else it lapsed between the two: try again
                return token, holder.decode() if isinstance(holder, bytes) else str(holder)
        return None

    async def _sent_reply(self, sent: asyncio.Future[Any]) -> Any:
        """The reply of a command already written, read at once when it is in; shielded,
        so a cancelled caller leaves it for ``release`` to look at."""
        try:
            reply = sent.result() if sent.done() else await asyncio.shield(sent)
            if isinstance(reply, hiredis.ReplyError):
                raise error_of(reply)
        except FAILURES as exc:
            self._link.mark_down("flight lease", exc)
            raise FleetUnavailable(f"redis failed (flight lease): {type(exc).__name__}") from exc
        return reply

    def _give_back(self, lease: str, token: str, reply: asyncio.Future[Any]) -> None:
        if reply.cancelled() or reply.exception() is not None:
            return
        is_taken = reply.result()
        if is_taken is None or isinstance(is_taken, hiredis.ReplyError):
            return  # not ours
        # Its entry wakes any follower at once (rather than after its block); kept briefly.
        fields = relay.released_fields()
        stream = f"{lease}:{token}"
        drop = self._write(lease, stream, token, fields, "drop", self._lease_ms, is_deferred=True)
        writer = asyncio.get_running_loop().create_task(_quietly(drop))
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)

    async def _lead(
        self, flight: Flight, run: Callable[[Flight], Awaitable[None]], lease: str, token: str
    ) -> None:
        # The writer starts a turn later: its first steps (and its renewer's) would otherwise
        # run before the upstream request is written, and nothing reaches followers earlier.
        asyncio.get_running_loop().call_soon(self._start_writer, flight, lease, token)
        await run(flight)

    def _start_writer(self, flight: Flight, lease: str, token: str) -> None:
        writer = asyncio.get_running_loop().create_task(self._publish(flight, lease, token))
        self._writers.add(writer)  # held, so the loop cannot drop it half way
        writer.add_done_callback(self._writers.discard)

    async def _publish(self, flight: Flight, lease: str, token: str) -> None:
        renewer = asyncio.get_running_loop().create_task(self._keep(lease, token))
        try:
            await self._relay(flight, lease, token)
        except FleetUnavailable:
            pass  # the link logged it; the leader's own clients are not affected
        except Exception:
            # A bug here must not reach the leader's clients; followers will take over.
            _log.exception("fleet flight writer failed")
        finally:
            renewer.cancel()

    async def _keep(self, lease: str, token: str) -> None:
        while True:
            await asyncio.sleep(self._renew_s)
            try:
                (kept,) = await self._link.scripts(
                    "flight renew", [(self._renew, [lease], [token, self._lease_ms])]
                )
            except FleetUnavailable:
                continue  # perhaps another feature's failure: try again next time
            if not kept:
                return

    async def _relay(self, flight: Flight, lease: str, token: str) -> None:
        """Appends what the flight gained since the last write, until it ends."""
        stream = f"{lease}:{token}"
        seq = index = 0
        is_started = False
        pending: list[Any] = []  # kept across a failed write: a follower must see no gap
        while True:
            if not is_started and flight.is_started:
                pending += relay.start_fields(
                    seq, flight.status, flight.headers, flight.upstream_name, flight.ttfb_ms
                )
                seq, is_started = seq + 1, True
            chunks = flight.chunks
            while is_started and index < len(chunks):
                pending += relay.chunk_fields(seq, chunks[index], flight.usage_at.get(index, 0))
                seq, index = seq + 1, index + 1
            if flight.is_done:
                await self._write_end(flight, lease, stream, token, seq, pending)
                return
            if pending:
                try:
                    if not await self._write(lease, stream, token, pending, ""):
                        return  # fenced out: another replica leads now
                    pending = []
                except FleetUnavailable:
                    await asyncio.sleep(self._renew_s)  # the lease outlives a short outage
                continue
            await flight.wait_change()
            # The flight's own waiters send to their clients first, and what arrives
            # meanwhile joins this batch: followers wait this much longer, a client none.
            # A finished flight's end goes out after one turn of the loop (for those
            # waiters), deferred (``RespConnection.batch``): with the next request's lease
            # when one follows at once, else ``DEFER_S`` later; a replica asked the same
            # meanwhile follows the stream until the end arrives.
            await asyncio.sleep(0 if flight.is_done else _FLUSH_DELAY_S)

    async def _write_end(
        self, flight: Flight, lease: str, stream: str, token: str, seq: int, fields: list[Any]
    ) -> None:
        error = flight.error
        if error is not None and error.code == "cancelled":
            # Every local client left: no end entry, so a follower takes over at once.
            await self._write(lease, stream, token, [], "drop")
            return
        fields += relay.end_fields(seq, error)
        is_whole = error is None and flight.status == 200
        # Deferred: the flight's own clients have their answer; followers wait a moment.
        final = "done" if is_whole else "drop"
        await self._write(lease, stream, token, fields, final, is_deferred=True)

    async def _write(
        self,
        lease: str,
        stream: str,
        token: str,
        fields: list[Any],
        final: str,
        ttl_ms: int | None = None,
        *,
        is_deferred: bool = False,
    ) -> bool:
        ttl_ms = self._ttl_ms if ttl_ms is None else ttl_ms
        args = [token, self._max_chunks, ttl_ms, final, self._lease_ms, *fields]
        (written,) = await self._link.scripts(
            "flight publish", [(self._append, [lease, stream], args)], is_deferred=is_deferred
        )
        return bool(written)

    async def _follow(self, flight: Flight, job: FleetJob, lease: str, holder: str) -> None:
        for _ in range(_MAX_HANDOVERS):
            flight.is_relayed = True
            outcome = await self._read(flight, job, lease, holder.removeprefix(_DONE_PREFIX))
            if outcome is _Outcome.FINISHED:
                return
            if outcome is _Outcome.RELEASED:
                # Nobody called upstream: this replica may, as a first leader would (even
                # for a request that must not run twice).
                flight.is_relayed = False
            elif outcome is not _Outcome.LOST:
                break
            taken = await self._take(lease)
            if taken is None:
                break
            token, holder = taken
            if holder == token:
                _log.info("fleet flight %s: leader gone, this replica takes over", lease)
                await self._lead(flight, lambda f: self._regenerate(f, job), lease, token)
                return
        await self._regenerate(flight, job)

    async def _read(self, flight: Flight, job: FleetJob, lease: str, token: str) -> _Outcome:
        """Feeds one leader's stream into the flight until it ends or cannot go on."""
        stream = f"{lease}:{token}"
        feed = _feed(flight, job)
        last_id: bytes | str = b"0-0"
        seq = 0
        while True:
            try:
                reply: Any = await self._reader.xread(
                    {stream: last_id}, count=_READ_COUNT, block=self._block_ms
                )
            except FAILURES as exc:
                self._link.mark_down("flight follow", exc)
                return _Outcome.AWAY
            if not reply:
                outcome = await self._check_leader(lease, token)
                if outcome is not None:
                    return outcome
                continue
            for entry_id, fields in reply[0][1]:
                last_id = entry_id
                entry = relay.decode_entry(fields)
                if entry.seq != seq:
                    return _Outcome.GAP
                if entry.kind == relay.RELEASED:
                    return _Outcome.RELEASED
                seq += 1
                if feed.take(entry):
                    return _Outcome.FINISHED

    async def _check_leader(self, lease: str, token: str) -> _Outcome | None:
        """None while the leader still holds the lease (or finished: the end is on its way)."""
        try:
            # On the reader, as the XREAD was: another feature's failure is not this one's.
            holder = await self._reader.get(lease)
        except FAILURES as exc:
            self._link.mark_down("flight follow", exc)
            return _Outcome.AWAY
        if holder in (token.encode(), f"{_DONE_PREFIX}{token}".encode()):
            return None
        return _Outcome.LOST

    async def _regenerate(self, flight: Flight, job: FleetJob) -> None:
        """Calls upstream from here, continuing what this replica's clients already got."""
        if flight.is_relayed and not job.is_idempotent:
            flight.finish(_not_repeated())
            return
        if not flight.is_started:
            await job.pump(flight)  # nothing reached a client: a plain local call
            return
        if relay.is_whole_stream(flight.chunks):
            _finish(flight, job.commit)  # only the end entry was lost
            return
        try:
            call = await job.open()
        except HastenError as exc:
            flight.finish(exc)
            return
        feed = _feed(flight, job)
        try:
            feed.start(
                relay.Head(call.status, dict(call.headers), call.upstream.name, call.ttfb_ms)
            )
            async for chunk in call.iter_chunks():
                feed.push(chunk)
            feed.finish()
        except HastenError as exc:
            flight.finish(exc)
            return
        finally:
            call.close()
        _finish(flight, job.commit)


async def _quietly(write: Awaitable[bool]) -> None:
    with contextlib.suppress(FleetUnavailable):  # the lease lapses on its own
        await write


def _not_repeated() -> UpstreamError:
    return UpstreamError(
        "the replica calling upstream for this request stopped, and a request marked "
        "x-hasten-idempotent: false is not sent again",
        code="fleet_leader_lost",
    )


def _finish(flight: Flight, commit: Callable[[], None] | None) -> None:
    flight.finish()
    if commit is not None and flight.status == 200:
        commit()


def _feed(flight: Flight, job: FleetJob) -> relay.Feed:
    return relay.Feed(
        flight,
        job.recorder,
        is_sse=job.is_sse,
        endpoint=job.endpoint,
        max_bytes=job.max_answer_bytes,
    )

"""A lean, pipelined Redis connection for the commands the request path sends.

redis-py's asyncio client spends about 150-200 us of CPU on one command (a connection taken
from and given back to its pool, a command object, its response callbacks), where the
round trip itself is under 100 us on loopback: at the fleet's few commands per request that
is most of what a limited key costs. This connection writes each command (or a batch) with
one ``transport.write`` and matches replies first in, first out, parsed by hiredis, so any
number of coroutines share it, pipelined; about 50 us of CPU a command
(``bench/support/fleet_cost.py`` measures the whole path).

Failures are redis-py's exception types (``FleetLink`` and its callers already handle
them): a lost or timed-out connection fails every command waiting on it with
``ConnectionError``/``TimeoutError`` and is dropped, so a late reply can never be matched
to the wrong command; the next command connects again. A Redis error reply is raised as
``ResponseError`` (``NoScriptError`` for NOSCRIPT), or returned in place in a batch.
Blocking reads and everything else keep redis-py's client (``FleetLink.client``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How long a deferred command waits for another command to ride with (``batch``).
DEFER_S = 0.002

Arg = str | bytes | int | float
Command = Sequence[Arg]


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script run by its SHA-1 (EVALSHA), its source sent only when Redis lacks it."""

    source: str
    sha: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    def command(self, keys: Sequence[Arg], args: Sequence[Arg]) -> list[Arg]:
        return ["EVALSHA", self.sha, len(keys), *keys, *args]

    def fallback(self, keys: Sequence[Arg], args: Sequence[Arg]) -> list[Arg]:
        """The same as EVAL, with the source: for a Redis that lost its script cache."""
        return ["EVAL", self.source, len(keys), *keys, *args]


ScriptRun = tuple[LuaScript, Sequence[Arg], Sequence[Arg]]  # the script, its KEYS, its ARGV


def pack(commands: Sequence[Command]) -> bytes:
    """The RESP2 encoding of ``commands``, back to back."""
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, float):
                data = repr(arg).encode()
            else:
                data = b"%d" % arg
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def error_of(reply: hiredis.ReplyError) -> ResponseError:
    """A Redis error reply as redis-py's exception (NOSCRIPT: ``NoScriptError``)."""
    message = str(reply)
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.reader = hiredis.Reader()
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
            while self.waiters:
                reply = self.reader.gets()
                if reply is False:
                    return
                waiter = self.waiters.popleft()
                if not waiter.done():
                    waiter.set_result(reply)
        except hiredis.ProtocolError as exc:  # a garbled stream: nothing after it is safe
            self.fail(RedisConnectionError(f"redis protocol error: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"redis connection lost: {exc or 'closed'}"))

    def fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


class RespConnection:
    """One pipelined connection to the Redis at ``url``, opened on first use."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float,
        op_timeout_s: float,
        defer_s: float = DEFER_S,
    ) -> None:
        self._options: dict[str, Any] = dict(parse_url(url))
        self._connect_timeout_s = connect_timeout_s
        self._op_timeout_s = op_timeout_s
        self._defer_s = defer_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None
        # Deferred commands not yet written, their futures, and the timer that writes them.
        self._deferred: list[Command] = []
        self._deferred_futures: list[asyncio.Future[Any]] = []
        self._deferred_timer: asyncio.TimerHandle | None = None

    async def call(self, *command: Arg) -> Any:
        """One command's reply; an error reply raises ``ResponseError``."""
        (reply,) = await self.batch([command])
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def send_now(self, *command: Arg) -> asyncio.Future[Any] | None:
        """Writes ``command`` before this returns and gives its reply's future (an error
        reply in place, as ``hiredis.ReplyError``; a connection lost or past the op timeout
        fails it), or None while the connection is not up: the caller then uses ``call``.

        No coroutine, no task: a caller that finds the future already done when it needs
        the reply (the round trip overlapped its other work) reads it without yielding."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            return None
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._write_deferred([command], [future])
        timer = loop.call_later(self._op_timeout_s, self._expire, protocol, future)
        future.add_done_callback(lambda _: timer.cancel())
        return future

    async def batch(self, commands: Sequence[Command], *, is_deferred: bool = False) -> list[Any]:
        """The replies of ``commands``, sent in one write; error replies in place as
        ``ResponseError``. A failed connection raises for the whole batch.

        ``is_deferred``: written up to ``defer_s`` later, with the next batch that is not
        (or alone when none comes): for what is sent after an answer, so that it neither
        competes with the client reading that answer nor costs a write and a wake-up of
        its own when the next request's command follows at once."""
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if is_deferred and protocol is not None and protocol.lost is None:
            futures = [loop.create_future() for _ in commands]
            self._deferred += commands
            self._deferred_futures += futures
            if self._deferred_timer is None:
                self._deferred_timer = loop.call_later(self._defer_s, self._write_deferred)
            timeout_s = self._op_timeout_s + self._defer_s
        else:
            protocol = await self._connected()
            futures = [loop.create_future() for _ in commands]
            self._write_deferred(commands, futures)
            timeout_s = self._op_timeout_s
        return await self._replies(protocol, futures, timeout_s)

    async def _replies(
        self, protocol: _Protocol, futures: Sequence[asyncio.Future[Any]], timeout_s: float
    ) -> list[Any]:
        """The replies of written (or deferred) commands, error replies as exceptions."""
        # A timer rather than asyncio.timeout: a fraction of its cost per command. On expiry
        # the connection is dropped, failing every command still waiting on it.
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout_s, self._expire, protocol, futures[-1])
        try:
            if len(futures) == 1:
                replies = [await futures[0]]
            else:  # gather: every future's exception is retrieved, not only the first's
                replies = await asyncio.gather(*futures)
        finally:
            timer.cancel()
        return [error_of(r) if isinstance(r, hiredis.ReplyError) else r for r in replies]

    def _write_deferred(
        self,
        commands: Sequence[Command] = (),
        futures: Sequence[asyncio.Future[Any]] = (),
    ) -> None:
        """Writes the deferred commands, then ``commands``, in one write (in the order they
        were asked: replies come back first in, first out)."""
        if self._deferred_timer is not None:
            self._deferred_timer.cancel()
            self._deferred_timer = None
        if self._deferred:
            commands, futures = [*self._deferred, *commands], [*self._deferred_futures, *futures]
            self._deferred, self._deferred_futures = [], []
        protocol = self._protocol
        if protocol is None or protocol.lost is not None or protocol.transport is None:
            # Dropped while they waited (the connection's failure already failed them).
            lost = RedisConnectionError("redis connection lost")
            for future in futures:
                if not future.done():
                    future.set_exception(lost)
            return
        if commands:
            protocol.waiters.extend(futures)
            protocol.transport.write(pack(commands))

    def _expire(
        self, protocol: _Protocol, last: asyncio.Future[Any], is_final: bool = False
    ) -> None:
        if last.done():
            return  # answered; only its coroutine has not resumed yet
        if not is_final:
            # A starved loop may run this timer before it reads a socket that is already
            # readable (libuv runs due timers first in a turn): look again after one turn.
            loop = asyncio.get_running_loop()
            loop.call_later(0, self._expire, protocol, last, True)
            return
        # The replies still owed would be read as the next commands': drop it all.
        self._drop(protocol, RedisTimeoutError("redis command timed out"))

    async def scripts(self, runs: Sequence[ScriptRun], *, is_deferred: bool = False) -> list[Any]:
        """Runs scripts in one batch by SHA (error replies in place); those Redis had no copy
        of (a restart), once more with their source. ``is_deferred`` as for ``batch``."""
        commands = [script.command(keys, args) for script, keys, args in runs]
        replies = await self.batch(commands, is_deferred=is_deferred)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            again = await self.batch([runs[i][0].fallback(runs[i][1], runs[i][2]) for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def aclose(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._protocol is not None:
            self._drop(self._protocol, RedisConnectionError("closed"))

    def _drop(self, protocol: _Protocol, exc: BaseException) -> None:
        protocol.fail(exc)
        if self._protocol is protocol:
            self._protocol = None
            self._write_deferred()  # none is written to a dropped connection: they fail

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and protocol.lost is None:
            return protocol
        self._protocol = None
        if self._connecting is None or self._connecting.done():
            # One connect for every command that finds the connection down at once.
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
        try:
            protocol = await asyncio.shield(self._connecting)
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(f"redis connect failed: {exc}") from exc
        self._protocol = protocol
        return protocol

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        options = self._options
        kind = options.get("connection_class")
        async with asyncio.timeout(self._connect_timeout_s):
            if kind is UnixDomainSocketConnection:
                _, protocol = await loop.create_unix_connection(_Protocol, options["path"])
            else:
                tls = ssl.create_default_context() if kind is SSLConnection else None
                _, protocol = await loop.create_connection(
                    _Protocol, options.get("host", "localhost"), options.get("port", 6379), ssl=tls
                )
            hello = _hello(options)
            if hello:
                await self._greet(protocol, hello)
        return protocol

    async def _greet(self, protocol: _Protocol, commands: list[Command]) -> None:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        protocol.waiters.extend(futures)
        assert protocol.transport is not None
        protocol.transport.write(pack(commands))
        for reply in await asyncio.gather(*futures):
            if isinstance(reply, hiredis.ReplyError):
                with contextlib.suppress(Exception):
                    protocol.fail(RedisConnectionError("redis refused the connection"))
                raise RedisConnectionError(f"redis refused the connection: {reply}")


def _hello(options: dict[str, Any]) -> list[Command]:
    """AUTH and SELECT from the URL, sent before any command."""
    commands: list[Command] = []
    password = options.get("password")
    if password is not None:
        username = options.get("username")
        commands.append(("AUTH", username, password) if username else ("AUTH", password))
    db = int(options.get("db", 0) or 0)
    if db:
        commands.append(("SELECT", db))
    return commands

"""The fleet's Redis connection: short timeouts, and a backoff once Redis fails.

Every fleet feature (cross-replica coalescing, shared routing state, key limits) talks to
Redis through one ``FleetLink``. A failed call marks Redis away for ``retry_backoff_s``:
until then ``is_up`` is False and each feature uses its replica-local fallback without
paying a timeout per request. One warning is logged per outage, one info on recovery.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from hasten.config.fleet import FleetConfig
from hasten.config.tables import redact_url
from hasten.errors import FleetUnavailable
from hasten.fleet.resp import RespConnection, ScriptRun
from hasten.storage.redis import redis_client

_log = logging.getLogger("hasten.fleet")

T = TypeVar("T")
FAILURES = (RedisError, OSError, TimeoutError)


class FleetLink:
    """One Redis client for the fleet, with a shared view of whether Redis is reachable."""

    def __init__(self, config: FleetConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        assert config.redis_url is not None
        self.config = config
        self.prefix = config.key_prefix
        self._url = redact_url(config.redis_url)
        self._clock = clock
        self.client: Redis = redis_client(
            config.redis_url,
            connect_timeout_s=config.connect_timeout_s,
            op_timeout_s=config.op_timeout_s,
        )
        # The request path's commands: pipelined, a third of redis-py's CPU per command.
        self.fast = RespConnection(
            config.redis_url,
            connect_timeout_s=config.connect_timeout_s,
            op_timeout_s=config.op_timeout_s,
        )
        self._retry_at_s = 0.0
        self._is_down = False
        self.num_failures = 0

    def key(self, *parts: str) -> str:
        """A fleet key: the prefix, then the parts joined by ':'."""
        return self.prefix + ":".join(parts)

    @property
    def is_up(self) -> bool:
        """False while backing off after a failure: callers use their local fallback."""
        return not self._is_down or self._clock() >= self._retry_at_s

    async def run(self, what: str, op: Callable[[Redis], Awaitable[T]]) -> T:
        """Runs one Redis operation; raises ``FleetUnavailable`` if Redis is away or fails."""
        if not self.is_up:
            raise FleetUnavailable(f"redis away ({what})")
        try:
            result = await op(self.client)
        except FAILURES as exc:
            self.mark_down(what, exc)
            raise FleetUnavailable(f"redis failed ({what}): {type(exc).__name__}") from exc
        if self._is_down:
            self._is_down = False
            _log.info("fleet redis %s is back", self._url)
        return result

    async def scripts(
        self, what: str, runs: Sequence[ScriptRun], *, is_deferred: bool = False
    ) -> list[Any]:
        """Runs Lua scripts in one round trip on the fast connection (``is_deferred``: see
        ``RespConnection.batch``); raises ``FleetUnavailable`` like ``run``, and a script's
        own error (a bug) as well."""
        replies = await self.run(what, lambda _: self.fast.scripts(runs, is_deferred=is_deferred))
        for reply in replies:
            if isinstance(reply, RedisError):
                self.mark_down(what, reply)
                raise FleetUnavailable(f"redis failed ({what}): {reply}") from reply
        return replies

    def mark_down(self, what: str, exc: BaseException) -> None:
        """Records a failure seen outside ``run`` (a blocking read, a pipeline)."""
        self.num_failures += 1
        if not self._is_down:
            _log.warning(
                "fleet redis %s failed during %s (%s): replicas fall back to local state "
                "for %.1f s at a time",
                self._url,
                what,
                type(exc).__name__,
                self.config.retry_backoff_s,
            )
        self._is_down = True
        self._retry_at_s = self._clock() + self.config.retry_backoff_s

    async def aclose(self) -> None:
        await self.fast.aclose()
        with contextlib.suppress(*FAILURES):
            await self.client.aclose()

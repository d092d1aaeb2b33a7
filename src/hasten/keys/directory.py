"""The virtual keys as the gateway uses them: a store behind the request path's cache.

``resolve`` is the request path's one call (through ``hasten.auth.Authenticator``): a
digest resolved within the last ``ttl_s`` costs a dict lookup, not a store round trip, and
concurrent requests with the same cold digest share one lookup. With the store away, a
key this replica already knew keeps working; one it never saw gets a 503 (the store cannot
say it is invalid, so no 401). The admin API changes keys through ``store`` and calls
``forget``, so this replica sees its own changes at once; the others within ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from hasten.errors import DamagedKeyRecord, KeyStoreUnavailable
from hasten.keys.lookup import ResolvedKeys
from hasten.keys.store import KeyStore
from hasten.values.caller import Caller

_log = logging.getLogger("hasten.keys")


class KeyDirectory:
    def __init__(
        self,
        store: KeyStore,
        cache: ResolvedKeys,
        *,
        max_keys: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cache = cache
        self.max_keys = max_keys
        self._clock = clock
        self._pending: dict[bytes, asyncio.Future[Caller | None]] = {}
        self._generation = 0  # bumped by forget: a lookup begun before it is not cached
        self.num_lookups = 0
        self.num_damaged = 0

    async def resolve(self, digest: bytes) -> Caller | None:
        """The caller whose virtual key has this digest; None for no (or a revoked) key."""
        cached = self.cache.fresh(digest, self._clock())
        if cached is not None:
            return cached.caller
        task = self._pending.get(digest)
        if task is None:
            # A task of its own: a waiter that goes away does not cancel the others' lookup.
            task = asyncio.ensure_future(self._look_up(digest))
            self._pending[digest] = task
            task.add_done_callback(lambda done: self._done(digest, done))
        return await asyncio.shield(task)

    def forget(self, digest: bytes) -> None:
        self._generation += 1
        self.cache.forget(digest)

    def _done(self, digest: bytes, task: asyncio.Future[Caller | None]) -> None:
        self._pending.pop(digest, None)
        if not task.cancelled():
            task.exception()  # retrieved, even when every waiter has gone

    async def aclose(self) -> None:
        await self.store.aclose()

    async def _look_up(self, digest: bytes) -> Caller | None:
        generation = self._generation
        self.num_lookups += 1
        try:
            record = await self.store.find(digest)
        except KeyStoreUnavailable:
            stale = self.cache.stale(digest)
            if stale is None:
                raise
            return stale
        except DamagedKeyRecord as exc:
            # Refused, and remembered as unknown: a damaged row is not re-read per request.
            self.num_damaged += 1
            _log.warning("virtual keys: a stored key is refused: %s", exc)
            record = None
        caller = None if record is None or record.is_revoked else record.caller()
        if generation == self._generation:
            self.cache.remember(digest, caller, self._clock())
        return caller

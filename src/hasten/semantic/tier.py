"""The semantic cache on the request path: after an exact miss, find an answer by meaning.

A semantic entry only points at an exact-cache key, so an answer is stored once and every
tier's freshness rules still apply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from hasten.cache import CachedAnswer, TieredCache
from hasten.semantic.matcher import SemanticMatch
from hasten.semantic.store import NewEntry, SemanticCache
from hasten.values.stage import NO_STAGE, Stage

_log = logging.getLogger("hasten.semantic")
MAX_BACKGROUND_TASKS = 1024


@dataclass(frozen=True, slots=True)
class SemanticHit:
    entry: CachedAnswer
    match: SemanticMatch

    def headers(self) -> list[tuple[bytes, bytes]]:
        """What the client may judge the hit by: the cosine, the entry (to report it wrong)
        and, when the decision was calibrated, the estimated chance it is wrong."""
        headers = [
            (b"x-hasten-semantic-similarity", f"{self.match.similarity:.4f}".encode()),
            (b"x-hasten-semantic-entry", str(self.match.entry_id).encode()),
        ]
        if self.match.risk is not None:
            headers.append((b"x-hasten-semantic-risk", f"{self.match.risk:.4f}".encode()))
        return headers


class SemanticTier:
    """Glue between the gateway's ``exact`` cache and the semantic ``cache``."""

    def __init__(self, cache: SemanticCache, exact: TieredCache) -> None:
        self.cache = cache
        self._exact = exact
        self._tasks: set[asyncio.Task[Any]] = set()

    async def find(
        self,
        body: dict[str, Any],
        *,
        model: str,
        tenant: str,
        max_age_s: float | None,
        trace: Stage = NO_STAGE,
    ) -> SemanticHit | None:
        """A hit to serve, or None (``trace``: the lookup's span, under which the embedding
        gets its own)."""
        try:
            match = await self.cache.lookup(body, model=model, tenant=tenant, trace=trace)
        except Exception:
            _log.exception("semantic lookup failed; answering from upstream")
            return None
        if match is None:
            return None
        entry = await self._exact.get(match.answer_key, max_age_s=max_age_s)
        if entry is None:
            return None  # the answer expired or was evicted from the exact tiers
        return SemanticHit(entry, match)

    def remember(
        self,
        body: dict[str, Any],
        *,
        model: str,
        tenant: str,
        key: str,
        ttl_s: float,
    ) -> None:
        """Indexes a freshly stored answer by meaning, in the background."""
        self._spawn(self.cache.insert_entry(NewEntry(body, model, tenant, key, ttl_s)))

    async def report_wrong(self, entry_id: int, tenant: str | None) -> bool:
        """User feedback on a served hit: evict its entry. ``tenant`` None (the admin key)
        may name any entry; a tenant only its own."""
        is_owned = tenant is None or await self.cache.count_entries(
            tenant=tenant, entry_id=entry_id
        )
        if not is_owned:
            return False
        self.cache.counters["reported_wrong"] += 1
        return await self.cache.invalidate(entry_id=entry_id, tenant=tenant) > 0

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        if len(self._tasks) >= MAX_BACKGROUND_TASKS:
            work.close()  # overloaded: skipping an index write only costs a future hit
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("semantic background task failed: %s", task.exception())

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        await self.drain()
        await self.cache.close()

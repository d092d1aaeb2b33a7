"""The semantic cache on the request path: after an exact miss, find an answer by meaning.

A semantic entry only points at an exact-cache key, so an answer is stored once and every
tier's freshness rules still apply.

Answer classes. The ambiguity rule (``matcher``) refuses a lookup when two close entries
have different answers. Live traffic creates such pairs by itself: Q1 is cached, its
paraphrase Q2 lands just below the cut-off, is answered upstream and stored under its own
answer; from then on every paraphrase near both is refused, and the more paraphrases arrive
the fewer hit. The gateway has the evidence to tell that case from a real conflict: it holds
both answers. So a lookup that serves nothing reports the closest candidate it refused
(``LookupResult.near``); once the fresh answer is in, it is compared with that entry's
cached answer and, if they agree, the new entry is stored in the near entry's answer class.
Entries of one class never make each other ambiguous. Without that evidence every entry is
its own class (its id), so an insert-only workload (bench/semantic/evaluate.py) decides
exactly as before classes existed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import orjson

from hasten.apis import messages, responses
from hasten.apis.known import MESSAGES, RESPONSES, api_named
from hasten.cache import CachedAnswer, TieredCache
from hasten.cache.replay import answer_body
from hasten.semantic.matcher import Candidate, SemanticMatch
from hasten.semantic.partition import trimmed
from hasten.semantic.store import NewEntry, SemanticCache
from hasten.values.stage import NO_STAGE, Stage

_log = logging.getLogger("hasten.semantic")
# Two answers agree only when their texts are the same (``partition.trimmed``): a wrong join
# silences the ambiguity rule for good. Measured with bench/semantic/live.py
# (gptcache_mock_pairs clusters, classes off: 724 correct and 175 wrong hits): joining at
# answer cosine 0.95 gave +19 correct / +21 wrong, at 0.98 +5 / +7, on identical answers
# only +1 / +0; what a deterministic model gives.
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


@dataclass(frozen=True, slots=True)
class Found:
    """What a lookup found: a ``hit`` to serve, or the entry the upstream's fresh answer may
    join the answer class of (``near``)."""

    hit: SemanticHit | None = None
    near: Candidate | None = None


_NOT_FOUND = Found()


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
    ) -> Found:
        """A hit to serve, or what the upstream's fresh answer is to be compared with
        (``trace``: the lookup's span, under which the embedding gets its own)."""
        try:
            result = await self.cache.lookup_near(body, model=model, tenant=tenant, trace=trace)
        except Exception:
            _log.exception("semantic lookup failed; answering from upstream")
            return _NOT_FOUND
        match = result.match
        if match is None:
            return Found(near=result.near)
        entry = await self._exact.get(match.answer_key, max_age_s=max_age_s)
        if entry is None:
            return _NOT_FOUND  # the answer expired or was evicted from the exact tiers
        return Found(hit=SemanticHit(entry, match))

    def remember(
        self,
        body: dict[str, Any],
        *,
        model: str,
        tenant: str,
        key: str,
        ttl_s: float,
        near: Candidate | None = None,
    ) -> None:
        """Indexes a freshly stored answer by meaning, in the background: in ``near``'s
        answer class if the two answers agree."""
        self._spawn(self._remember(NewEntry(body, model, tenant, key, ttl_s), near))

    async def _remember(self, entry: NewEntry, near: Candidate | None) -> None:
        # Compared before the insert, so the class travels with it (one row write, one
        # shared-tier event, no update to follow); the cost: the entry becomes searchable
        # one answer comparison later, which only matters after a near miss.
        answer_class = None if near is None else await self._joined_class(near, entry.answer_key)
        await self.cache.insert_entry(entry, answer_class=answer_class)

    async def _joined_class(self, near: Candidate, fresh_key: str) -> int | None:
        counters = self.cache.counters
        try:
            agrees = await self._agree(near.answer_key, fresh_key)
        except Exception:  # the insert matters more than its class
            _log.warning("semantic answer comparison failed", exc_info=True)
            agrees = None
        if agrees is None:
            counters["answer_class_unchecked"] += 1
            return None
        counters["answer_class_joined" if agrees else "answer_class_disagreed"] += 1
        return near.answer_class if agrees else None

    async def _agree(self, cached_key: str, fresh_key: str) -> bool | None:
        """Whether two stored answers' texts are the same (spacing inside an answer may be
        code's: only their ends are trimmed); None when either is gone or has no text."""
        cached = await self._exact.get(cached_key)
        fresh = await self._exact.get(fresh_key)
        if cached is None or fresh is None:
            return None
        cached_text, fresh_text = _answer_text(cached), _answer_text(fresh)
        if cached_text is None or fresh_text is None:
            return None
        return trimmed(cached_text) == trimmed(fresh_text)

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


def _answer_text(entry: CachedAnswer) -> str | None:
    """The text of a stored answer, in whichever client API it was stored."""
    try:
        parsed = orjson.loads(answer_body(entry, api_named(entry.endpoint)))
        if entry.endpoint == RESPONSES:
            return responses.output_text(parsed)
        if entry.endpoint == MESSAGES:
            return messages.message_text(parsed)
        content = parsed["choices"][0]["message"].get("content")
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return content if isinstance(content, str) else None

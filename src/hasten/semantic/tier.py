"""The semantic cache on the request path: after an exact miss, find an answer by meaning.

A semantic entry only points at an exact-cache key, so an answer is stored once and every
tier's freshness rules still apply. In error-budget mode some would-be hits are sent to
the upstream instead; the fresh answer is compared with the cached one and the verdict
tunes that entry's own threshold. After a near miss the fresh answer is compared with the
near entry's the same way, and joins its answer class when they agree (``semantic.near``).
With a judge (``semantic.judge``), a near miss within its band is judged in the background
and, on a yes whose fresh answer agrees, stored as a verified alias (``semantic.aliases``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from hasten.cache import CachedAnswer, TieredCache
from hasten.cache.replay import answer_body
from hasten.semantic import NearMiss, NewEntry, SemanticCache, SemanticMatch, aliases
from hasten.semantic.judge import AsyncJudge, Ticket
from hasten.semantic.judge_rules import JudgeCase, is_judgeable
from hasten.semantic.partition import split_chat
from hasten.values.stage import NO_STAGE, Stage

_log = logging.getLogger("hasten.semantic")
# Two answers "agree" when their texts embed this close: deterministic answers to the
# same question differ in wording far less than answers to different questions.
ANSWER_AGREEMENT_SIMILARITY = 0.95
# Joining an answer class is stricter than a verification verdict: a wrong join silences the
# ambiguity rule for good. Measured with bench/semantic_live.py (gptcache_mock_pairs
# clusters, classes off: 724 correct and 175 wrong hits): joining at answer cosine 0.95
# gave +19 correct / +21 wrong, at 0.98 +5 / +7, on identical answers only +1 / +0. So by
# default only identical answers (whitespace aside) join: what a deterministic model gives.
JOIN_AGREEMENT_SIMILARITY = math.inf
MAX_BACKGROUND_TASKS = 1024


@dataclass(frozen=True, slots=True)
class SemanticHit:
    entry: CachedAnswer
    match: SemanticMatch

    def headers(self) -> list[tuple[bytes, bytes]]:
        """What the client may judge the hit by: the cosine, the entry (to report it wrong)
        and, when the decision was calibrated, the estimated chance it is wrong and the
        verifier's verdict if one was asked."""
        headers = [
            (b"x-hasten-semantic-similarity", f"{self.match.similarity:.4f}".encode()),
            (b"x-hasten-semantic-entry", str(self.match.entry_id).encode()),
        ]
        if self.match.risk is not None:
            headers.append((b"x-hasten-semantic-risk", f"{self.match.risk:.4f}".encode()))
        if self.match.verdict is not None:
            headers.append((b"x-hasten-semantic-verifier", self.match.verdict.encode()))
        return headers


@dataclass(frozen=True, slots=True)
class Found:
    """What a lookup found: a ``hit`` to serve, or a match to verify against the upstream's
    fresh answer (``to_verify``), and the entry that answer may join the class of (``near``)."""

    hit: SemanticHit | None = None
    to_verify: SemanticMatch | None = None
    near: NearMiss | None = None
    judging: Ticket | None = None  # the near miss's pair, queued for the judge


_NOT_FOUND = Found()


class SemanticTier:
    """Glue between the gateway's ``exact`` cache and the semantic ``cache``.

    ``join_classes`` False keeps every entry in its own answer class, as before classes
    existed; ``join_agreement_similarity`` above 1 lets only identical answer texts join
    (benchmarks compare these).
    """

    def __init__(
        self,
        cache: SemanticCache,
        exact: TieredCache,
        *,
        join_classes: bool = True,
        join_agreement_similarity: float = JOIN_AGREEMENT_SIMILARITY,
    ) -> None:
        self.cache = cache
        self._exact = exact
        self._join_classes = join_classes
        self._join_agreement_similarity = join_agreement_similarity
        self._tasks: set[asyncio.Task[Any]] = set()
        # The asynchronous judge (None: off); set after the gateway's upstream client exists.
        self.judge: AsyncJudge | None = None
        self.judge_band = 0.0
        self.alias_answer_similarity = aliases.DEFAULT_ANSWER_SIMILARITY

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
            # Only the judge needs the near miss (found by embedding) when nothing is served:
            # without it, a miss where only repeats are served is decided by the text alone.
            result = await self.cache.lookup_near(
                body,
                model=model,
                tenant=tenant,
                trace=trace,
                is_near_needed=self.judge is not None,
            )
        except Exception:
            _log.exception("semantic lookup failed; answering from upstream")
            return _NOT_FOUND
        match, near = result.match, result.near if self._join_classes else None
        if match is None or match.is_verification:
            judging = None if match is not None else self._judging(body, model, tenant, result.near)
            return Found(to_verify=match, near=near, judging=judging)
        entry = await self._exact.get(match.answer_key, max_age_s=max_age_s)
        if entry is None:
            return _NOT_FOUND  # the answer expired or was evicted from the exact tiers
        return Found(hit=SemanticHit(entry, match))

    def _judging(
        self, body: dict[str, Any], model: str, tenant: str, near: NearMiss | None
    ) -> Ticket | None:
        """Queues a near miss within the judge's band for a background judgement."""
        judge = self.judge
        max_risk = self.cache.policy.max_risk
        if judge is None or near is None or not is_judgeable(near.risk, max_risk, self.judge_band):
            return None
        query = split_chat(body, model=model, tenant=tenant)
        if query is None or near.risk is None:
            return None
        case = JudgeCase(
            tenant,
            query.partition_key,
            model,
            query.text,
            near.text,
            near.entry_id,
            near.answer_key,
            near.risk,
            near.script or "latin",
        )
        return judge.submit(case)

    def remember(
        self,
        body: dict[str, Any],
        *,
        model: str,
        tenant: str,
        key: str,
        ttl_s: float,
        near: NearMiss | None = None,
        judging: Ticket | None = None,
    ) -> None:
        """Indexes a freshly stored answer by meaning, in the background: in ``near``'s
        answer class if the two answers agree, or as a verified alias of the entry
        ``judging`` judged when the judge said yes and the answers agree."""
        self._spawn(self._remember(body, model, tenant, key, ttl_s, near, judging))

    async def remember_many(self, entries: Sequence[NewEntry]) -> int:
        """Indexes many stored answers now (an import), in batches; how many were indexed.
        Awaited, not spawned: an import of thousands of lines must not overflow the
        background tasks (each line its own task dropped lines past ``MAX_BACKGROUND_TASKS``)."""
        return await self.cache.insert_many(entries)

    async def _remember(
        self,
        body: dict[str, Any],
        model: str,
        tenant: str,
        key: str,
        ttl_s: float,
        near: NearMiss | None,
        judging: Ticket | None = None,
    ) -> None:
        if judging is not None and self.judge is not None:
            made = await aliases.settle(
                self.judge,
                self.cache,
                judging,
                key,
                texts=self._texts,
                cosine=self._cosine,
                ttl_s=ttl_s,
                min_cosine=self.alias_answer_similarity,
            )
            if made:
                return  # the alias is this question's row: an entry of its own would repeat it
        # Compared before the insert, so the class travels with it (one row write, one
        # shared-tier event, no update to follow); the cost: the entry becomes searchable
        # one answer comparison later, which only matters after a near miss.
        answer_class = None if near is None else await self._joined_class(near, key)
        await self.cache.insert(
            body,
            model=model,
            tenant=tenant,
            answer_key=key,
            ttl_s=ttl_s,
            answer_class=answer_class,
        )

    async def _joined_class(self, near: NearMiss, fresh_key: str) -> int | None:
        counters = self.cache.counters
        try:
            agrees = await self._compare(
                near.answer_key, fresh_key, self._join_agreement_similarity
            )
        except Exception:  # the insert matters more than its class
            _log.warning("semantic answer comparison failed", exc_info=True)
            agrees = None
        if agrees is None:
            counters["answer_class_unchecked"] += 1
            return None
        counters["answer_class_joined" if agrees else "answer_class_disagreed"] += 1
        return near.answer_class if agrees else None

    def verify(self, match: SemanticMatch, fresh_key: str) -> None:
        """Compares a fresh answer with the one the match would have served."""
        self._spawn(self._verify(match, fresh_key))

    async def _verify(self, match: SemanticMatch, fresh_key: str) -> None:
        is_correct = await self._compare(match.answer_key, fresh_key, ANSWER_AGREEMENT_SIMILARITY)
        if is_correct is not None:
            await self.cache.report_verification(match, is_correct=is_correct)

    async def _compare(self, cached_key: str, fresh_key: str, min_similarity: float) -> bool | None:
        """Whether two stored answers agree; None when either is gone or carries no text."""
        texts = await self._texts(cached_key, fresh_key)
        if texts is None:
            return None
        return await self._agree(texts[0], texts[1], min_similarity)

    async def _texts(self, cached_key: str, fresh_key: str) -> tuple[str, str] | None:
        """The two stored answers' texts; None when either is gone or carries no text."""
        cached = await self._exact.get(cached_key)
        fresh = await self._exact.get(fresh_key)
        if cached is None or fresh is None:
            return None
        cached_text, fresh_text = _answer_text(cached), _answer_text(fresh)
        if cached_text is None or fresh_text is None:
            return None
        return cached_text, fresh_text

    async def _cosine(self, one: str, two: str) -> float:
        vectors = [await self.cache.embedder.embed(text) for text in (one, two)]
        return float(np.dot(vectors[0], vectors[1]))

    async def _agree(self, one: str, two: str, min_similarity: float) -> bool:
        if " ".join(one.split()) == " ".join(two.split()):
            return True
        if min_similarity > 1.0:  # identical texts only: no need to embed
            return False
        vectors = [await self.cache.embedder.embed(text) for text in (one, two)]
        return float(np.dot(vectors[0], vectors[1])) >= min_similarity

    async def report_wrong(self, entry_id: int, similarity: float, tenant: str | None) -> bool:
        """User feedback on a served hit: teach the entry's threshold, then evict it.

        ``tenant`` None (the admin key) may name any entry; a tenant only its own, so no
        tenant can teach another's thresholds."""
        is_owned = tenant is None or await self.cache.count_entries(
            tenant=tenant, entry_id=entry_id
        )
        if not is_owned:
            return False
        match = SemanticMatch(entry_id=entry_id, similarity=similarity, answer_key="")
        await self.cache.report_verification(match, is_correct=False)
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
        if self.judge is not None:
            await self.judge.aclose()
        await self.drain()
        await self.cache.close()


def _answer_text(entry: CachedAnswer) -> str | None:
    try:
        parsed = orjson.loads(answer_body(entry))
        message = parsed["choices"][0]["message"]
        content = message.get("content")
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
        return None
    return content if isinstance(content, str) else None

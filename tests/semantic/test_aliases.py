"""Verified aliases through ``SemanticTier``: only a yes whose fresh answer agrees makes one;
it serves its entry's answer, stays in its tenant, goes with its entry and persists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from hasten.cache import CachedAnswer, MemoryLRU, TieredCache
from hasten.semantic.calibration import Calibration, ScriptModel
from hasten.semantic.judge import AsyncJudge, Judged
from hasten.semantic.judge_rules import JudgeCase, SpendPolicy
from hasten.semantic.store import ALIAS, SemanticCache, SemanticStoreConfig
from hasten.semantic.tier import SemanticTier
from tests.support.gateway import completion
from tests.support.semantic import Clock, WordsEmbedder, chat

# A toy calibration for the words embedder: identical texts are served (risk 0.01); other
# candidates are never safe enough: risk 0.3 (judgeable in a band of 0.45) from cosine 0.83
# up (logit (s - 0.9) / 0.05 >= -1.39), 1 below it.
TOY = Calibration(
    embedder=WordsEmbedder.name,
    models={
        "latin": ScriptModel(
            weights=(0.0, 1.0, 0.0, 0.0, 0.0),
            bins=((0.0, 0.0), (0.2, 0.7)),
            center=0.9,
            scale=0.05,
            min_similarity=0.5,
        )
    },
    identical_precision=0.99,
)
Q1 = "how do i cook rice"
Q2 = "how do i cook brown rice quickly"  # 0.845 to Q1: a near miss, within the band
Q4 = "how do i cook brown rice slowly"  # another near miss of Q1
BOIL = "Boil it for 12 minutes."


class Scripted:
    name = "scripted"
    is_metered = False

    def __init__(self, verdict: bool | None) -> None:
        self.verdict = verdict
        self.cases: list[JudgeCase] = []

    async def judge(self, case: JudgeCase) -> Judged:
        self.cases.append(case)
        return Judged(self.verdict)


class Gateway:
    """What the gateway does around the tier, with canned upstream answers."""

    def __init__(
        self, path: Path, verdict: bool | None, *, policy: SpendPolicy | None = None
    ) -> None:
        self.clock = Clock()
        config = SemanticStoreConfig(path=path / "semantic.sqlite3")
        cache = SemanticCache(WordsEmbedder(), config, clock=self.clock, calibration=TOY)
        self.exact = TieredCache(MemoryLRU(1 << 20))
        self.tier = SemanticTier(cache, self.exact)
        self.backend = Scripted(verdict)
        self.tier.judge = AsyncJudge(
            self.backend, policy or SpendPolicy(), counts=cache.judge_counts, clock=self.clock
        )
        self.tier.judge_band = 0.45

    @property
    def cache(self) -> SemanticCache:
        return self.tier.cache

    def counts(self) -> dict[str, int]:
        return dict(self.cache.script_stats().get("latin", {}))

    async def ask(self, text: str, key: str, answer: str, tenant: str = "t") -> Any:
        """The hit's match (served by meaning), or None: answered upstream and remembered."""
        found = await self.tier.find(chat(text), model="m", tenant=tenant, max_age_s=None)
        if found.hit is not None:
            return found.hit.match
        body = orjson.dumps(completion(answer))
        self.exact.put(key, CachedAnswer.from_body(body, endpoint="chat", ttl_s=600))
        self.tier.remember(
            chat(text),
            model="m",
            tenant=tenant,
            key=key,
            ttl_s=600,
            near=found.near,
            judging=found.judging,
        )
        await self.tier.drain()
        return None


async def test_a_yes_whose_answer_agrees_makes_an_alias_that_serves(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True)
    assert await gateway.ask(Q1, "k1", BOIL) is None
    assert await gateway.ask(Q2, "k2", "boil it for 12  minutes.") is None  # a miss now
    case = gateway.backend.cases[0]
    assert (case.asked, case.stored, case.tenant) == (Q2, Q1, "t") and 0.05 <= case.risk < 0.5
    match = await gateway.ask(Q2, "k2b", "unused")  # the same question again (no exact hit)
    assert match is not None and match.verdict == ALIAS and match.answer_key == "k1"
    assert match.risk is not None and match.risk < 0.05
    counts = gateway.counts()
    assert counts["judged"] == counts["judge_yes"] == counts["judge_agreed"] == 1
    assert counts["aliases_made"] == counts["alias_hits"] == 1
    assert gateway.cache.stats()["judge"]["aliases_made"] == 1
    assert await gateway.cache.count_entries() == 2  # the entry and its alias, no third row
    await gateway.tier.aclose()


async def test_a_no_or_a_disagreeing_answer_never_makes_an_alias(tmp_path: Path) -> None:
    refused = Gateway(tmp_path / "no", verdict=False)
    assert await refused.ask(Q1, "k1", BOIL) is None
    assert await refused.ask(Q2, "k2", BOIL) is None
    match = await refused.ask(Q2, "k2b", "unused")
    assert match is not None and match.verdict is None and match.answer_key == "k2"  # its own
    assert refused.counts()["judge_no"] == 1 and "aliases_made" not in refused.counts()
    await refused.tier.aclose()
    disagreed = Gateway(tmp_path / "disagree", verdict=True)
    assert await disagreed.ask(Q1, "k1", BOIL) is None
    assert await disagreed.ask(Q2, "k2", "Fry it in butter.") is None
    match = await disagreed.ask(Q2, "k2b", "unused")
    assert match is not None and match.verdict is None and match.answer_key == "k2"
    counts = disagreed.counts()
    assert counts["judge_yes"] == counts["judge_disagreed"] == 1
    assert "aliases_made" not in counts
    await disagreed.tier.aclose()


async def test_aliases_stay_in_their_tenant(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True)
    assert await gateway.ask(Q1, "k1", BOIL, tenant="a") is None
    assert await gateway.ask(Q2, "k2", BOIL, tenant="b") is None  # nothing of b's is near
    assert gateway.backend.cases == []
    assert await gateway.ask(Q2, "k2a", BOIL, tenant="a") is None  # judged in a: alias
    match = await gateway.ask(Q2, "k2c", "unused", tenant="b")  # b's own entry, not a's alias
    assert match is not None and match.answer_key == "k2" and match.verdict is None
    match = await gateway.ask(Q2, "k2d", "unused", tenant="a")
    assert match is not None and match.answer_key == "k1" and match.verdict == ALIAS
    await gateway.tier.aclose()


async def test_an_alias_goes_with_its_entry_and_never_outlives_it(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True)
    assert await gateway.ask(Q1, "k1", BOIL) is None
    assert await gateway.ask(Q2, "k2", BOIL) is None
    match = await gateway.ask(Q2, "k2b", "unused")
    assert match is not None and match.verdict == ALIAS
    entry_id = gateway.backend.cases[0].entry_id
    assert await gateway.cache.invalidate(entry_id=entry_id) == 1
    assert await gateway.cache.count_entries() == 0  # the alias went with it
    assert gateway.cache.counters["aliases_removed"] == 1
    assert await gateway.ask(Q2, "k2c", BOIL) is None  # no entry near: not judged again
    await gateway.tier.aclose()
    late = Gateway(tmp_path / "expiry", verdict=True)
    assert await late.ask(Q1, "k1", BOIL) is None
    late.clock.now += 300  # the alias, made now, may live only the entry's other 300 s
    assert await late.ask(Q2, "k2", BOIL) is None
    late.clock.now += 301
    assert await late.ask(Q2, "k2b", BOIL) is None
    assert late.cache.counters["expired"] >= 1
    await late.tier.aclose()


async def test_aliases_persist_with_the_store(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True)
    assert await gateway.ask(Q1, "k1", BOIL) is None
    assert await gateway.ask(Q2, "k2", BOIL) is None
    await gateway.tier.aclose()
    reopened = Gateway(tmp_path, verdict=False)
    reopened.exact.put(
        "k1", CachedAnswer.from_body(orjson.dumps(completion(BOIL)), endpoint="chat", ttl_s=60)
    )
    match = await reopened.ask(Q2, "k2b", "unused")
    assert match is not None and match.verdict == ALIAS and match.answer_key == "k1"
    await reopened.tier.aclose()


async def test_pairs_over_budget_are_dropped_and_stored_as_entries(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True, policy=SpendPolicy(max_per_minute=1))
    assert await gateway.ask(Q1, "k1", BOIL) is None
    assert await gateway.ask(Q2, "k2", BOIL) is None
    assert await gateway.ask(Q4, "k4", BOIL) is None  # the minute's judgement is spent
    counts = gateway.counts()
    assert counts["judged"] == 1 and counts["judge_dropped_budget"] == 1
    assert counts["aliases_made"] == 1
    match = await gateway.ask(Q4, "k4b", "unused")
    assert match is not None and match.answer_key == "k4" and match.verdict is None
    await gateway.tier.aclose()


async def test_an_alias_of_an_alias_serves_and_goes_with_the_first_entry(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, verdict=True)
    assert await gateway.ask(Q1, "k1", BOIL) is None
    assert await gateway.ask(Q2, "k2", BOIL) is None  # an alias of Q1's entry
    nearer = "how do i cook brown rice quickly please"  # closest to the alias
    assert await gateway.ask(nearer, "k5", BOIL) is None
    assert gateway.backend.cases[-1].stored == Q2  # judged against the alias
    match = await gateway.ask(nearer, "k5b", "unused")
    assert match is not None and match.verdict == ALIAS and match.answer_key == "k1"
    assert await gateway.cache.invalidate(entry_id=gateway.backend.cases[0].entry_id) == 1
    assert await gateway.cache.count_entries() == 0  # both aliases named the first entry
    await gateway.tier.aclose()

"""Answer classes: runners-up whose answers agreed are no conflict; near misses; migration."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.cache import CachedAnswer, MemoryLRU, TieredCache
from hasten.semantic import matcher
from hasten.semantic.guard import signature
from hasten.semantic.records import Records, Row
from hasten.semantic.redis_tier import SharedEntry, decode_entry, encode_entry
from hasten.semantic.store import SemanticCache, SemanticStoreConfig
from hasten.semantic.tier import SemanticTier
from tests.support.gateway import completion
from tests.support.semantic import WordsEmbedder, chat, eventually, lookup, make_cache, rebuilt

# With WordsEmbedder and min_similarity 0.9 (floor 0.7): Q2 is a near miss of Q1 (0.845);
# Q3 is above the cut-off to both (0.926 to Q2, 0.913 to Q1), so it hits only if they agree.
Q1 = "how do i cook rice"
Q2 = "how do i cook brown rice quickly"
Q3 = "how do i cook brown rice"
POLICY = matcher.MatchPolicy(min_similarity=0.9)
SIG = signature(Q3)


def _candidate(entry_id: int, similarity: float, key: str, answer_class: int) -> matcher.Candidate:
    return matcher.Candidate(entry_id, similarity, SIG, key, answer_class)


def test_runner_up_of_the_same_class_is_no_conflict() -> None:
    best, same = _candidate(2, 0.93, "k2", 1), _candidate(1, 0.92, "k1", 1)
    choice = matcher.choose(SIG, [same, best], POLICY)
    assert choice.is_hit and choice.candidate == best
    # Below the cut-off but failing the ratio test: still no conflict within a class.
    close = _candidate(1, 0.89, "k1", 1)
    assert matcher.choose(SIG, [best, close], POLICY).is_hit


def test_runner_up_of_another_class_still_conflicts() -> None:
    best, other = _candidate(2, 0.93, "k2", 2), _candidate(1, 0.92, "k1", 1)
    choice = matcher.choose(SIG, [best, other], POLICY)
    assert choice.reason == matcher.AMBIGUOUS and choice.candidate == best
    # A same-class runner-up does not hide a conflicting one further down.
    joined, third = _candidate(3, 0.925, "k3", 2), _candidate(4, 0.91, "k4", 4)
    assert matcher.choose(SIG, [best, joined, third], POLICY).reason == matcher.AMBIGUOUS
    # Far enough behind (ratio test) and below the cut-off: served, as before classes.
    assert matcher.choose(SIG, [best, _candidate(1, 0.5, "k1", 1)], POLICY).is_hit


_CANDIDATES = st.lists(
    st.tuples(
        st.floats(min_value=0.6, max_value=1.0),
        st.sampled_from(["k1", "k2", "k3"]),
        st.sampled_from([Q1, Q2, Q3, "how do i cook rice in 3 minutes"]),
    ),
    max_size=6,
)


@given(_CANDIDATES)
@settings(max_examples=300, deadline=None)
def test_joining_classes_never_loses_a_hit(rows: list[tuple[float, str, str]]) -> None:
    own = [
        matcher.Candidate(i, sim, signature(text), key, i)
        for i, (sim, key, text) in enumerate(rows, start=1)
    ]
    joined = [
        matcher.Candidate(c.entry_id, c.similarity, c.signature, c.answer_key, 0) for c in own
    ]
    before, after = (matcher.choose(SIG, cands, POLICY) for cands in (own, joined))
    assert after.reason != matcher.AMBIGUOUS
    if before.is_hit:
        assert after.is_hit and after.candidate is not None and before.candidate is not None
        assert after.candidate.entry_id == before.candidate.entry_id
    if before.reason == matcher.AMBIGUOUS:
        assert after.is_hit  # the ambiguity was only about classes


async def test_near_miss_reported_and_a_joined_entry_is_served(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    first = await cache.insert(chat(Q1), model="m", tenant="t", answer_key="k1")
    assert first is not None
    result = await cache.lookup_near(chat(Q2), model="m", tenant="t")
    assert result.match is None and result.near is not None
    assert (result.near.entry_id, result.near.answer_key) == (first, "k1")
    assert result.near.answer_class == first and 0.8 < result.near.similarity < 0.9
    far = await cache.lookup_near(chat("who painted the mona lisa"), model="m", tenant="t")
    assert far.match is None and far.near is None  # nothing within the candidate floor
    hit = await cache.lookup_near(chat(Q1), model="m", tenant="t")
    assert hit.match is not None and hit.near is None
    await cache.insert(chat(Q2), model="m", tenant="t", answer_key="k2", answer_class=first)
    match = await lookup(cache, chat(Q3), model="m", tenant="t")
    assert match is not None and match.answer_key == "k2"
    await cache.close()
    again = make_cache(tmp_path)  # the class is in the file
    assert await lookup(again, chat(Q3), model="m", tenant="t") is not None
    await again.close()


async def test_without_a_join_the_paraphrases_stay_ambiguous(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    await cache.insert(chat(Q1), model="m", tenant="t", answer_key="k1")
    await cache.insert(chat(Q2), model="m", tenant="t", answer_key="k2")
    result = await cache.lookup_near(chat(Q3), model="m", tenant="t")
    assert result.match is None and cache.counters["lookup_ambiguous"] == 1
    assert result.near is not None and result.near.answer_key == "k2"
    await cache.close()


_V1_SCHEMA = """
CREATE TABLE hasten_semantic_v1 (
    id INTEGER PRIMARY KEY, partition TEXT NOT NULL, tenant TEXT NOT NULL,
    model TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, answer_key TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, accessed_at REAL NOT NULL,
    num_hits INTEGER NOT NULL DEFAULT 0, size_bytes INTEGER NOT NULL, observations BLOB
);
"""


def test_records_without_the_column_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(_V1_SCHEMA)
    blob = np.ones(4, dtype=np.float16).tobytes()
    conn.execute(
        "INSERT INTO hasten_semantic_v1 (id, partition, tenant, model, text, vector,"
        " answer_key, created_at, expires_at, accessed_at, size_bytes)"
        " VALUES (7, 'p', 't', 'm', 'q', ?, 'k', 0, 9e9, 0, 1)",
        (blob,),
    )
    conn.commit()
    conn.close()
    records = Records(path)
    assert records.entries([7])[7].answer_class == 7  # no value: its own class
    vector = np.ones(4, dtype=np.float32)
    new = records.insert(Row("p", "t", "m", "q2", "k2", 0.0, 9e9, answer_class=7), vector)
    assert records.entries([new])[new].answer_class == 7
    records.close()
    reopened = Records(path)  # the column is there now: nothing to add
    assert reopened.entries([7, new])[new].answer_class == 7
    reopened.close()


async def test_an_old_file_still_serves(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    await cache.insert(chat(Q1), model="m", tenant="t", answer_key="k1")
    await cache.close()
    conn = sqlite3.connect(tmp_path / "semantic.sqlite3")  # back to the first schema
    conn.execute("ALTER TABLE hasten_semantic_v1 DROP COLUMN answer_class")
    conn.commit()
    conn.close()
    again = make_cache(tmp_path)
    match = await lookup(again, chat("how do i COOK rice"), model="m", tenant="t")
    assert match is not None and match.answer_key == "k1"
    await again.close()


def _as_redis_returns(entry: SharedEntry) -> dict[bytes, bytes]:
    # redis-py's encoding: bytes as they are, text as UTF-8, a number as its repr.
    return {
        k.encode(): v if isinstance(v, bytes) else (v if isinstance(v, str) else repr(v)).encode()
        for k, v in encode_entry(entry).items()
    }


def test_shared_entry_class_is_optional_on_the_wire() -> None:
    entry = SharedEntry(5, Row("p", "t", "m", "q", "k", 1.0, 2.0), b"\x00\x00")
    fields = _as_redis_returns(entry)
    assert b"answer_class" not in fields  # what replicas without classes wrote and read
    assert decode_entry(5, fields) == entry
    joined = SharedEntry(6, Row("p", "t", "m", "q", "k", 1.0, 2.0, answer_class=5), b"\x00\x00")
    assert decode_entry(6, _as_redis_returns(joined)) == joined


def _replica(path: Path, redis_url: str, namespace: str) -> SemanticCache:
    config = SemanticStoreConfig(
        path=path / "semantic.sqlite3",
        min_similarity=0.9,
        redis_url=redis_url,
        redis_namespace=namespace,
    )
    return SemanticCache(WordsEmbedder(), config, clock=time.time)


async def test_answer_class_travels_to_other_replicas(tmp_path: Path, redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    one = _replica(tmp_path / "one", redis_url, namespace)
    two = _replica(tmp_path / "two", redis_url, namespace)
    two.start()
    first = await one.insert(chat(Q1), model="m", tenant="t", answer_key="k1")
    await one.insert(chat(Q2), model="m", tenant="t", answer_key="k2", answer_class=first)

    async def serves_the_joined_entry(cache: SemanticCache) -> bool:
        # Q1 alone would serve Q3 too: only Q2's answer shows that both were applied.
        match = await lookup(cache, chat(Q3), model="m", tenant="t")
        return match is not None and match.answer_key == "k2"

    await eventually(lambda: serves_the_joined_entry(two))
    late = _replica(tmp_path / "late", redis_url, namespace)  # rebuilds from the hashes
    await eventually(lambda: serves_the_joined_entry(late))
    await eventually(rebuilt(late, num_rebuilds=1))
    for cache in (one, two, late):
        await cache.close()


class _Gateway:
    """What the gateway does around ``SemanticTier``, with a canned upstream answer."""

    def __init__(self, path: Path, *, join_classes: bool = True) -> None:
        self.exact = TieredCache(MemoryLRU(1 << 20))
        self.tier = SemanticTier(make_cache(path), self.exact)
        self.join_classes = join_classes  # False: remembered without the near miss

    async def ask(self, text: str, key: str, answer: str) -> bool:
        """Served by meaning (True), or answered "upstream" and remembered (False)."""
        found = await self.tier.find(chat(text), model="m", tenant="t", max_age_s=None)
        if found.hit is not None:
            return True
        body = orjson.dumps(completion(answer))
        self.exact.put(key, CachedAnswer.from_body(body, endpoint="chat", ttl_s=60))
        near = found.near if self.join_classes else None
        self.tier.remember(chat(text), model="m", tenant="t", key=key, ttl_s=60, near=near)
        await self.tier.drain()
        return False


BOIL = "Boil it for 12 minutes."


async def test_tier_joins_agreeing_answers_only(tmp_path: Path) -> None:
    agree = _Gateway(tmp_path / "agree")
    assert not await agree.ask(Q1, "k1", BOIL)
    assert not await agree.ask(Q2, "k2", BOIL + "\n")  # its ends trimmed, the same
    assert await agree.ask(Q3, "k3", "unused")
    assert agree.tier.cache.counters["answer_class_joined"] == 1
    await agree.tier.aclose()
    control = _Gateway(tmp_path / "disagree")
    assert not await control.ask(Q1, "k1", BOIL)
    assert not await control.ask(Q2, "k2", "Paris is the capital of France.")
    assert not await control.ask(Q3, "k3", "unused")  # ambiguous, its answer differs too
    assert control.tier.cache.counters["answer_class_disagreed"] == 2
    await control.tier.aclose()


async def test_tier_without_joining_or_without_the_near_answer(tmp_path: Path) -> None:
    off = _Gateway(tmp_path / "off", join_classes=False)
    assert not await off.ask(Q1, "k1", BOIL)
    assert not await off.ask(Q2, "k2", BOIL)
    assert not await off.ask(Q3, "k3", "unused")  # the collapse, kept for comparison
    assert "answer_class_joined" not in off.tier.cache.counters
    await off.tier.aclose()
    gone = _Gateway(tmp_path / "gone")
    assert not await gone.ask(Q1, "k1", BOIL)
    await gone.exact.delete("k1")  # the near entry's answer left the exact tiers
    assert not await gone.ask(Q2, "k2", BOIL)
    assert gone.tier.cache.counters["answer_class_unchecked"] == 1
    await gone.tier.aclose()

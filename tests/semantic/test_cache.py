"""Semantic cache: partitions, tenants, TTL, invalidation, persistence, batching."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hasten.cache import TieredCache
from hasten.cache.memory import MemoryLRU
from hasten.semantic.embedder import AsyncEmbedder, Vectors, normalize
from hasten.semantic.freshness import FreshnessPolicy
from hasten.semantic.index import VectorIndex
from hasten.semantic.partition import split_chat
from hasten.semantic.records import Row
from hasten.semantic.store import NewEntry, SemanticCache, SemanticStoreConfig
from hasten.semantic.tier import MAX_BACKGROUND_TASKS, SemanticTier
from tests.support.semantic import Clock, WordsEmbedder, chat, make_cache


async def test_paraphrase_hits_and_unrelated_misses(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    await cache.insert(chat("How do I cook rice?"), model="m", tenant="t", answer_key="k1")
    match = await cache.lookup(chat("how do i COOK rice"), model="m", tenant="t")
    assert match is not None and match.answer_key == "k1" and match.similarity > 0.99
    assert await cache.lookup(chat("Who painted the Mona Lisa?"), model="m", tenant="t") is None
    await cache.close()


async def test_follow_up_never_hits_another_conversation(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    ada = chat("Who was Ada Lovelace?", "A mathematician.", "How old was she when she died?")
    curie = chat("Who was Marie Curie?", "A physicist.", "How old was she when she died?")
    await cache.insert(ada, model="m", tenant="t", answer_key="ada-age")
    assert await cache.lookup(curie, model="m", tenant="t") is None
    same = await cache.lookup(ada, model="m", tenant="t")
    assert same is not None and same.answer_key == "ada-age"
    await cache.close()


def test_partition_covers_everything_but_the_last_user_turn() -> None:
    base = split_chat(chat("hi there"), model="m", tenant="t")
    assert base is not None and base.text == "hi there"

    def key(body: dict[str, Any], model: str = "m", tenant: str = "t") -> str:
        query = split_chat(body, model=model, tenant=tenant)
        assert query is not None
        return str(query.partition_key)

    assert key(chat("other words")) == base.partition_key
    assert key(chat("hi there", stream=True, user="u1")) == base.partition_key
    assert key(chat("hi there", temperature=0.0)) != base.partition_key
    assert key(chat("hi there", temperature=0)) == key(chat("hi there", temperature=0.0))
    assert key(chat("hi there", system="Be terse.")) != base.partition_key
    assert key(chat("hi there", tools=[{"type": "function"}])) != base.partition_key
    assert key(chat("hi there", response_format={"type": "json_object"})) != base.partition_key
    assert key(chat("hi there"), model="m2") != base.partition_key
    assert key(chat("hi there"), tenant="t2") != base.partition_key
    image = {"type": "image_url", "image_url": {"url": "data:"}}
    assert (
        split_chat({"messages": [{"role": "user", "content": [image]}]}, model="m", tenant="t")
        is None
    )
    assert split_chat(chat("q", "an answer"), model="m", tenant="t") is None
    assert split_chat({"messages": []}, model="m", tenant="t") is None


async def test_tenants_are_isolated(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    await cache.insert(chat("What is our refund policy?"), model="m", tenant="a", answer_key="a1")
    assert await cache.lookup(chat("What is our refund policy?"), model="m", tenant="b") is None
    assert await cache.lookup(chat("What is our refund policy?"), model="m", tenant="a") is not None
    await cache.close()


async def test_guard_and_ambiguity_reject(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, min_similarity=0.5)
    await cache.insert(chat("learn python in 3 months"), model="m", tenant="t", answer_key="k3")
    assert await cache.lookup(chat("learn python in 6 months"), model="m", tenant="t") is None
    assert cache.counters["guard_numbers"] == 1
    # Two stored questions with different answers, equally close: refuse to pick one.
    await cache.insert(chat("best rice cooker brand"), model="m", tenant="t", answer_key="x")
    await cache.insert(chat("best rice cooker brand"), model="m", tenant="t", answer_key="y")
    assert await cache.lookup(chat("brand best rice cooker"), model="m", tenant="t") is None
    assert cache.counters["lookup_ambiguous"] == 1
    await cache.close()


async def test_ttl_freshness_and_invalidation(tmp_path: Path) -> None:
    clock = Clock()
    policy = FreshnessPolicy(default_ttl_s=100.0, short_ttl_s=10.0)
    cache = make_cache(tmp_path, clock, freshness=policy)
    assert (
        await cache.insert(chat("weather in Paris now"), model="m", tenant="t", answer_key="w")
        is None
    )
    await cache.insert(chat("latest news headlines"), model="m", tenant="t", answer_key="n")
    await cache.insert(chat("who wrote hamlet"), model="m", tenant="t", answer_key="h")
    # A model's own TTL comes with the insert (the exact cache's), the smaller one counts.
    await cache.insert(chat("who wrote hamlet"), model="fast", tenant="t", answer_key="f", ttl_s=5)
    clock.now += 6
    assert await cache.lookup(chat("who wrote hamlet"), model="fast", tenant="t") is None
    assert await cache.lookup(chat("latest news headlines"), model="m", tenant="t") is not None
    clock.now += 5
    assert await cache.lookup(chat("latest news headlines"), model="m", tenant="t") is None
    assert await cache.lookup(chat("who wrote hamlet"), model="m", tenant="t") is not None
    clock.now += 100
    assert await cache.lookup(chat("who wrote hamlet"), model="m", tenant="t") is None
    await cache.close()


async def test_invalidate_by_id_tenant_model_age(tmp_path: Path) -> None:
    clock = Clock()
    cache = make_cache(tmp_path, clock)
    first = await cache.insert(chat("alpha question"), model="m1", tenant="a", answer_key="1")
    clock.now += 50
    await cache.insert(chat("beta question"), model="m1", tenant="b", answer_key="2")
    await cache.insert(chat("gamma question"), model="m2", tenant="b", answer_key="3")
    await cache.insert(chat("delta question"), model="m2", tenant="a", answer_key="4")
    assert first is not None and await cache.invalidate(entry_id=first) == 1
    assert await cache.invalidate(tenant="b", model="m1") == 1
    assert await cache.lookup(chat("beta question"), model="m1", tenant="b") is None
    assert await cache.lookup(chat("gamma question"), model="m2", tenant="b") is not None
    clock.now += 10
    assert await cache.invalidate(older_than_s=5) == 2
    assert await cache.invalidate() == 0
    assert cache.stats()["entries"] == 0
    await cache.close()


async def test_wrong_hit_report_removes_entry_of_its_tenant_only(tmp_path: Path) -> None:
    tier = SemanticTier(make_cache(tmp_path), TieredCache(MemoryLRU(1 << 20)))
    cache = tier.cache
    await cache.insert(chat("capital of australia"), model="m", tenant="t", answer_key="c")
    match = await cache.lookup(chat("capital of australia"), model="m", tenant="t")
    assert match is not None
    assert not await tier.report_wrong(match.entry_id, "another tenant")
    assert await tier.report_wrong(match.entry_id, "t")
    assert await cache.lookup(chat("capital of australia"), model="m", tenant="t") is None
    assert cache.counters["reported_wrong"] == 1
    await tier.aclose()


async def test_eviction_keeps_the_used_entries(tmp_path: Path) -> None:
    clock = Clock()
    cache = make_cache(tmp_path, clock, max_entries=10)
    await cache.insert(chat("popular question zero"), model="m", tenant="t", answer_key="hot")
    for index in range(30):
        clock.now += 1
        assert await cache.lookup(chat("popular question zero"), model="m", tenant="t")
        await cache.insert(
            chat(f"filler {index} text"), model="m", tenant="t", answer_key=str(index)
        )
    assert cache.stats()["entries"] <= 10
    assert await cache.lookup(chat("popular question zero"), model="m", tenant="t") is not None
    await cache.close()


async def test_persistence_across_restart_and_graph_rebuild(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, max_flat_entries=8)
    for index in range(20):
        await cache.insert(
            chat(f"topic {index} question"), model="m", tenant="t", answer_key=str(index)
        )
    await cache.close()
    graphs = list((tmp_path / "semantic.sqlite3.graphs").glob("*.usearch"))
    assert len(graphs) == 1

    reopened = make_cache(tmp_path, max_flat_entries=8)
    match = await reopened.lookup(chat("topic 7 question"), model="m", tenant="t")
    assert match is not None and match.answer_key == "7"
    assert reopened.counters["partitions_rebuilt"] == 0  # the saved graph was used
    await reopened.close()

    graphs[0].unlink()
    rebuilt = make_cache(tmp_path, max_flat_entries=8)
    match = await rebuilt.lookup(chat("topic 13 question"), model="m", tenant="t")
    assert match is not None and match.answer_key == "13"
    assert rebuilt.counters["partitions_rebuilt"] == 1
    await rebuilt.close()


async def test_concurrent_callers_share_batches() -> None:
    embedder = WordsEmbedder()
    front = AsyncEmbedder(embedder, max_batch=64)
    texts = [f"question number {index}" for index in range(40)]
    vectors = await asyncio.gather(*(front.embed(text) for text in texts))
    assert len(vectors) == 40 and sum(embedder.batches) == 40
    assert len(embedder.batches) < 40
    np.testing.assert_allclose(vectors[3], embedder.embed([texts[3]])[0])
    await front.close()


def test_flat_and_graph_partitions_agree() -> None:
    rng = np.random.default_rng(0)
    vectors = normalize(rng.standard_normal((300, 32)))
    flat = VectorIndex(32, max_flat_entries=1000)
    graph = VectorIndex(32, max_flat_entries=10)
    for entry_id, vector in enumerate(vectors):
        flat.add("p", entry_id, vector)
        graph.add("p", entry_id, vector)
    for probe in range(0, 300, 37):
        assert flat.search("p", vectors[probe], 1)[0][0] == probe
        assert graph.search("p", vectors[probe], 1)[0][0] == probe
    assert flat.remove("p", 5) and graph.remove("p", 5)
    assert flat.search("p", vectors[5], 1)[0][0] != 5
    assert graph.search("p", vectors[5], 1)[0][0] != 5
    assert flat.search("other", vectors[0], 3) == []


async def test_embedder_failure_is_a_miss_not_an_error(tmp_path: Path) -> None:
    class Broken(WordsEmbedder):
        def embed(self, texts: Sequence[str]) -> Vectors:
            raise OSError("embedding upstream down")

    config = SemanticStoreConfig(path=tmp_path / "s.sqlite3", min_similarity=0.9)
    cache = SemanticCache(Broken(), config)
    assert await cache.insert(chat("q one"), model="m", tenant="t", answer_key="k") is None
    assert await cache.lookup(chat("q one"), model="m", tenant="t") is None
    assert cache.stats()["lookup_errors"] == 1 and cache.stats()["insert_errors"] == 1
    await cache.close()


async def test_insert_many_indexes_a_large_import_in_batches(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    embedder = cache.embedder.embedder
    assert isinstance(embedder, WordsEmbedder)
    num_entries = MAX_BACKGROUND_TASKS + 300  # a task per line dropped the lines past this
    entries = [
        NewEntry(chat(f"imported question number {i}"), "m", "t", f"k{i}")
        for i in range(num_entries)
    ]
    skipped = NewEntry(chat("What time is it now?"), "m", "t", "volatile")  # freshness: never
    assert await cache.insert_many([*entries, skipped]) == num_entries
    assert cache.stats()["entries"] == num_entries == cache.counters["inserts"]
    assert len(embedder.batches) < num_entries // 16  # batches, not a call per question
    last = await cache.lookup(
        chat(f"imported question number {num_entries - 1}"), model="m", tenant="t"
    )
    assert last is not None and last.answer_key == f"k{num_entries - 1}"
    await cache.close()
    reopened = make_cache(tmp_path)  # committed: every row is in the file
    assert await reopened.count_entries(tenant="t") == num_entries
    await reopened.close()


async def test_insert_many_rolls_a_failed_chunk_back_from_file_and_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = make_cache(tmp_path)
    await cache.insert(chat("already stored question"), model="m", tenant="t", answer_key="old")
    records = cache._open()
    real_insert, calls = records.insert, []

    def insert_then_fail(row: Row, *args: Any) -> int:
        calls.append(row.text)
        if len(calls) == 3:
            raise OSError("disk full")
        return real_insert(row, *args)

    monkeypatch.setattr(records, "insert", insert_then_fail)
    entries = [NewEntry(chat(f"new question {i}"), "m", "t", f"k{i}") for i in range(5)]
    assert await cache.insert_many(entries) == 0
    assert cache.stats()["insert_errors"] == 1
    assert await cache.count_entries(tenant="t") == 1  # the first two rows were rolled back
    assert await cache.lookup(chat("new question 0"), model="m", tenant="t") is None
    old = await cache.lookup(chat("already stored question"), model="m", tenant="t")
    assert old is not None and old.answer_key == "old"
    await cache.close()

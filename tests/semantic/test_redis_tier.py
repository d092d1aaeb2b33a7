"""Redis as the semantic cache's shared tier: replicas see each other's inserts and deletes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from hasten.semantic.records import Row
from hasten.semantic.redis_tier import LOCAL_ID_BASE, SharedEntry, decode_entry, encode_entry
from hasten.semantic.replica import needs_rebuild
from hasten.semantic.store import NewEntry, SemanticCache, SemanticStoreConfig
from tests.support.semantic import WordsEmbedder, chat, eventually, rebuilt
from tests.support.servers import free_port, redis_server

QUESTION = chat("How do I cook rice?")
PARAPHRASE = chat("how do i COOK rice")


def _replica(path: Path, redis_url: str, namespace: str) -> SemanticCache:
    config = SemanticStoreConfig(
        path=path / "semantic.sqlite3",
        min_similarity=0.9,
        redis_url=redis_url,
        redis_namespace=namespace,
    )
    return SemanticCache(WordsEmbedder(), config, clock=time.time)  # Redis expiry is real time


async def test_insert_on_one_replica_hits_on_the_other(tmp_path: Path, redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    one = _replica(tmp_path / "one", redis_url, namespace)
    two = _replica(tmp_path / "two", redis_url, namespace)
    one.start()
    two.start()
    entry_id = await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
    assert entry_id is not None and entry_id < LOCAL_ID_BASE
    match = await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    assert (match.entry_id, match.answer_key) == (entry_id, "rice")
    assert await two.lookup(PARAPHRASE, model="m", tenant="other") is None  # tenants still apart
    # An invalidation on the replica that served the hit removes the entry everywhere.
    assert await two.invalidate(entry_id=entry_id) == 1

    async def is_gone() -> bool:
        return await one.lookup(PARAPHRASE, model="m", tenant="t") is None

    await eventually(is_gone)
    assert one.stats()["invalidated_shared"] == 1
    await one.close()
    await two.close()


async def test_filter_invalidation_reaches_other_replicas(tmp_path: Path, redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    one = _replica(tmp_path / "one", redis_url, namespace)
    two = _replica(tmp_path / "two", redis_url, namespace)
    two.start()
    await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
    await one.insert(chat("Who wrote Hamlet?"), model="other", tenant="t", answer_key="hamlet")
    await eventually(lambda: two.lookup(chat("who wrote hamlet"), model="other", tenant="t"))
    await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    assert await one.invalidate(model="m") == 1

    async def is_gone() -> bool:
        return await two.lookup(PARAPHRASE, model="m", tenant="t") is None

    await eventually(is_gone)
    assert await two.lookup(chat("who wrote hamlet"), model="other", tenant="t") is not None
    await one.close()
    await two.close()


async def test_new_replica_rebuilds_then_restarts_from_its_position(
    tmp_path: Path, redis_url: str
) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    writer = _replica(tmp_path / "writer", redis_url, namespace)
    await writer.insert(QUESTION, model="m", tenant="t", answer_key="rice")
    late = _replica(tmp_path / "late", redis_url, namespace)  # joins after the insert
    await eventually(lambda: late.lookup(PARAPHRASE, model="m", tenant="t"))
    await eventually(rebuilt(late, num_rebuilds=1))
    await late.close()
    await writer.insert(chat("Who wrote Hamlet?"), model="m", tenant="t", answer_key="hamlet")
    again = _replica(tmp_path / "late", redis_url, namespace)  # same file: resumes the stream
    await eventually(lambda: again.lookup(chat("who wrote hamlet"), model="m", tenant="t"))
    assert again.replica is not None and again.replica.is_following
    assert again.replica.num_rebuilds == 0
    await again.close()
    await writer.close()


async def test_redis_unreachable_degrades_to_the_local_index(tmp_path: Path) -> None:
    cache = _replica(tmp_path, f"redis://127.0.0.1:{free_port()}/0", "test:")
    entry_id = await cache.insert(QUESTION, model="m", tenant="t", answer_key="rice")
    assert entry_id is not None and entry_id >= LOCAL_ID_BASE  # never published
    match = await cache.lookup(PARAPHRASE, model="m", tenant="t")
    assert match is not None and match.entry_id == entry_id
    assert await cache.invalidate(entry_id=entry_id) == 1
    assert await cache.lookup(PARAPHRASE, model="m", tenant="t") is None
    await cache.close()


async def test_redis_going_away_and_back(tmp_path: Path) -> None:
    namespace = "test:"
    with redis_server() as url:
        one = _replica(tmp_path / "one", url, namespace)
        two = _replica(tmp_path / "two", url, namespace)
        two.start()
        await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
        await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    # Redis is gone: both keep serving from their local copies and accept local inserts.
    assert await two.lookup(PARAPHRASE, model="m", tenant="t") is not None
    hamlet = chat("Who wrote Hamlet?")
    local_id = await one.insert(hamlet, model="m", tenant="t", answer_key="hamlet")
    assert local_id is not None and local_id >= LOCAL_ID_BASE
    assert await one.lookup(chat("who wrote hamlet"), model="m", tenant="t") is not None
    assert await two.lookup(chat("who wrote hamlet"), model="m", tenant="t") is None
    await eventually(lambda: _has_failed(two))
    await one.close()
    await two.close()


async def test_invalidation_while_redis_is_away_is_shared_when_it_returns(
    tmp_path: Path,
) -> None:
    namespace, port, workdir = "test:", free_port(), str(tmp_path / "redis")
    Path(workdir).mkdir()
    one = _replica(tmp_path / "one", f"redis://127.0.0.1:{port}/0", namespace)
    two = _replica(tmp_path / "two", f"redis://127.0.0.1:{port}/0", namespace)
    with redis_server(port, workdir):
        one.start()
        two.start()
        entry_id = await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
        await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    # Redis is away: the invalidation holds locally and waits in one's file.
    assert await one.invalidate(entry_id=entry_id) == 1
    assert one.stats()["shared_publish_queued"] == 1
    assert await one.lookup(PARAPHRASE, model="m", tenant="t") is None
    assert await two.lookup(PARAPHRASE, model="m", tenant="t") is not None  # cannot know yet

    async def is_gone_on_two() -> bool:
        return await two.lookup(PARAPHRASE, model="m", tenant="t") is None

    with redis_server(port, workdir) as url:  # back, with its data
        await eventually(is_gone_on_two, num_tries=1000)
        assert one.replica is not None and one.replica.is_following
        follower = one.replica

        async def is_counted_on_one() -> bool:
            # The publisher counts the replayed delete only after its own bookkeeping write,
            # an await after replica two can already see the delete.
            return follower.num_replayed_deletes == 1

        await eventually(is_counted_on_one)
        # A replica that rebuilds from Redis does not bring the invalidated entry back.
        three = _replica(tmp_path / "three", url, namespace)
        three.start()
        hamlet = chat("Who wrote Hamlet?")
        await one.insert(hamlet, model="m", tenant="t", answer_key="hamlet")
        await eventually(lambda: three.lookup(chat("who wrote hamlet"), model="m", tenant="t"))
        assert await three.lookup(PARAPHRASE, model="m", tenant="t") is None
        for cache in (one, two, three):
            await cache.close()


async def _has_failed(cache: SemanticCache) -> bool:
    return cache.replica is not None and cache.replica.num_failures > 0


def test_rebuild_decision() -> None:
    assert needs_rebuild(None, None, b"0-0")
    assert not needs_rebuild(b"5-0", None, b"5-0")  # caught up, nothing new
    assert not needs_rebuild(b"5-0", b"3-0", b"9-0")  # still in the stream
    assert needs_rebuild(b"2-0", b"3-0", b"9-0")  # trimmed past our position
    assert needs_rebuild(b"12-0", b"3-0", b"9-0")  # a position from another Redis


async def test_malformed_event_is_skipped(tmp_path: Path, redis_url: str) -> None:
    from redis.asyncio import Redis

    namespace = f"test-{uuid.uuid4().hex}:"
    one = _replica(tmp_path / "one", redis_url, namespace)
    two = _replica(tmp_path / "two", redis_url, namespace)
    two.start()
    assert one.replica is not None
    events_key = one.replica.shared.events_key
    client = Redis.from_url(redis_url)
    await client.xadd(events_key, {"op": "delete", "filter": "not json"})
    await client.xadd(events_key, {"op": "insert", "id": "x"})
    await client.aclose()
    await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
    assert await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    await one.close()
    await two.close()


async def test_a_restarted_redis_costs_no_insert_its_share(tmp_path: Path) -> None:
    """Every pooled connection dies with a restart: the next write reconnects and goes
    through instead of failing once and leaving Redis alone for a back-off."""
    namespace, port, workdir = "test:", free_port(), str(tmp_path / "redis")
    Path(workdir).mkdir()
    url = f"redis://127.0.0.1:{port}/0"
    one = _replica(tmp_path / "one", url, namespace)
    two = _replica(tmp_path / "two", url, namespace)
    with redis_server(port, workdir):
        one.start()
        two.start()
        first = await one.insert(QUESTION, model="m", tenant="t", answer_key="rice")
        assert first is not None and first < LOCAL_ID_BASE
        await eventually(lambda: two.lookup(PARAPHRASE, model="m", tenant="t"))
    with redis_server(port, workdir):  # back, with its data
        hamlet = chat("Who wrote Hamlet?")
        entry_id = await one.insert(hamlet, model="m", tenant="t", answer_key="hamlet")
        assert entry_id is not None and entry_id < LOCAL_ID_BASE  # shared, not local-only
        assert one.stats()["shared_published"] == 2
        match = await eventually(
            lambda: two.lookup(chat("who wrote hamlet"), model="m", tenant="t")
        )
        assert match.entry_id == entry_id
        await one.close()
        await two.close()


async def test_insert_many_shares_every_entry_and_embeds_them_together(
    tmp_path: Path, redis_url: str
) -> None:
    namespace = f"test-{uuid.uuid4().hex}:"
    one = _replica(tmp_path / "one", redis_url, namespace)
    two = _replica(tmp_path / "two", redis_url, namespace)
    one.start()
    two.start()
    entries = [NewEntry(chat(f"shared import question {i}"), "m", "t", f"k{i}") for i in range(20)]
    assert await one.insert_many(entries) == 20
    embedder = one.embedder.embedder
    assert isinstance(embedder, WordsEmbedder) and sum(embedder.batches) == 20
    assert len(embedder.batches) == 1  # embedded together, then inserted one by one
    match = await eventually(
        lambda: two.lookup(chat("shared import question 7"), model="m", tenant="t")
    )
    assert match.answer_key == "k7"
    await one.close()
    await two.close()


def test_an_entry_hash_with_an_answer_class_still_decodes() -> None:
    # Replicas before issue 40 wrote an entry's answer class into its hash: read, ignored.
    entry = SharedEntry(5, Row("p", "t", "m", "q", "k", 1.0, 2.0), b"\x00\x00")
    fields = {
        name.encode(): value if isinstance(value, bytes) else str(value).encode()
        for name, value in encode_entry(entry).items()
    }
    assert decode_entry(5, fields) == entry
    assert decode_entry(5, {**fields, b"answer_class": b"3"}) == entry
    del fields[b"answer_key"]
    assert decode_entry(5, fields) is None  # malformed: a row field is missing

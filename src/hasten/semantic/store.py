"""SemanticCache: finds a cached answer to a question asked in other words.

``tier.SemanticTier`` asks it after an exact-cache miss (``lookup``) and tells it each
fresh answer's exact-cache key (``insert``). Only the final user turn is compared by meaning;
everything else must match exactly (see ``partition``). Embedding runs on its own worker
thread; SQLite and the vector index on another, so the event loop never blocks. Vectors and
metadata live in one SQLite file (beside the exact cache); HNSW graphs of large partitions
are saved next to it and rebuilt from the stored vectors whenever missing or stale.

What the store owns and who does what: the rows (``Records``), the vector index and its
saved graphs are the store's, touched on its one worker thread; ``Upkeep`` keeps their
totals, signatures, expiry and eviction in step (called from the store's worker-thread
methods); with ``redis_url`` set (the gateway does so when its exact cache is in Redis) the
file is this replica's copy of a shared tier, and ``SharedReplica`` owns the Redis side and
the following task (``replica``), reaching the rows only through the store's
``ReplicaStore`` methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import orjson

from hasten.semantic import freshness, matcher
from hasten.semantic.calibrated import CALIBRATIONS
from hasten.semantic.calibration import SCRIPTS, Calibration, script_of
from hasten.semantic.embedder import AsyncEmbedder, Embedder
from hasten.semantic.guard import signature
from hasten.semantic.index import VectorIndex
from hasten.semantic.matcher import SemanticMatch
from hasten.semantic.partition import split_chat
from hasten.semantic.records import Records, Row, StoredEntry, vector_bytes, vector_of
from hasten.semantic.redis_tier import LOCAL_ID_BASE, DeleteEvent, Event, RedisTier, SharedEntry
from hasten.semantic.replica import SharedReplica
from hasten.semantic.store_config import SemanticStoreConfig
from hasten.semantic.upkeep import Upkeep
from hasten.values.stage import NO_STAGE, Stage

__all__ = [
    "NewEntry",
    "SemanticCache",
    "SemanticMatch",
    "SemanticStoreConfig",
]

_LOG = logging.getLogger("hasten.semantic")
_R = TypeVar("_R")
Vector = npt.NDArray[np.float32]
# Rows of an import written per transaction (and embedded per call of ``embed_many``).
_INSERT_CHUNK = 256
# Rows given their vectors per model call after an import: small, so a lookup that needs the
# embedder meanwhile waits for at most this many questions (batches gain little per text).
_FILL_BATCH = 8
_FILL_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class NewEntry:
    """One question for ``insert_many``: the request it answers and where the answer is."""

    body: Mapping[str, Any]
    model: str
    tenant: str
    answer_key: str
    ttl_s: float | None = None


class SemanticCache:
    """The semantic tier. ``embedder`` may be shared with other users via ``AsyncEmbedder``.

    It is the ``ReplicaStore`` of its ``replica``.
    """

    def __init__(
        self,
        embedder: Embedder | AsyncEmbedder,
        config: SemanticStoreConfig,
        *,
        clock: Callable[[], float] = time.time,
        calibration: Calibration | None = None,
    ) -> None:
        """``calibration``: instead of the embedder's committed one (``calibrated``)."""
        self.embedder = embedder if isinstance(embedder, AsyncEmbedder) else AsyncEmbedder(embedder)
        model = self.embedder.embedder
        self.config = config
        calibration = calibration or CALIBRATIONS.get(model.name)
        if config.min_similarity is None and calibration is None:
            raise ValueError(f"no calibration for {model.name}: set min_similarity")
        self.policy = matcher.MatchPolicy(
            config.min_similarity or 1.0,
            config.max_distance_ratio,
            calibration=calibration if config.min_similarity is None else None,
            max_risk=1.0 - config.target_precision,
        )
        # Scripts whose lookups are decided from the text alone: the target admits nothing
        # but a repeated question there, so embedding the query could not change the answer.
        self._repeat_only_scripts = frozenset(
            script for script in SCRIPTS if self.policy.serves_only_repeats(script)
        )
        self._clock = clock
        self._dim = model.dim
        self._embedder_name = model.name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hasten-semantic")
        self.counters: Counter[str] = Counter()
        # Decisions by the query's script (``calibration.script_of``): latin, cjk, other.
        self._by_script: defaultdict[str, Counter[str]] = defaultdict(Counter)
        # Worker-thread state below.
        self._records: Records | None = None
        self._index = VectorIndex(
            self._dim,
            max_flat_entries=config.max_flat_entries,
            graph_dir=config.path.with_name(config.path.name + ".graphs"),
        )
        self._loaded: set[str] = set()
        self._upkeep = Upkeep(config, self._index, self.counters, dim=self._dim)
        # Rows waiting for their vector (an import's, where only repeats are served): counted
        # on the worker thread, given vectors by the ``_fill`` task, which runs while any wait.
        self._num_pending = 0
        self._filler: asyncio.Task[None] | None = None
        self._fill_retry_at = 0.0  # after a failed fill: a broken model is not asked per lookup
        self.replica: SharedReplica | None = None
        if config.redis_url is not None:
            namespace = f"{config.redis_namespace}{model.name}:{model.dim}:"
            shared = RedisTier(config.redis_url, namespace=namespace)
            self.replica = SharedReplica(shared, self, self.counters, clock=clock)

    def start(self) -> None:
        """Starts following the shared tier, if any, and giving rows that wait for their
        vector one (idempotent; outside an event loop it waits for the first lookup or
        insert)."""
        if self.replica is not None:
            self.replica.start()
        filler = self._filler
        is_due = self._num_pending > 0 and time.monotonic() >= self._fill_retry_at
        if filler is None or (is_due and filler.done()):
            with contextlib.suppress(RuntimeError):  # no running loop: the next call starts it
                self._filler = asyncio.get_running_loop().create_task(self._fill())

    @property
    def num_vectors_pending(self) -> int:
        """Rows found only by their text so far: their vectors are being filled in."""
        return self._num_pending

    async def wait_for_vectors(self) -> None:
        """Returns once no row waits for its vector (an import's rows are then found by
        meaning too, not only as repeats)."""
        self.start()
        while self._filler is not None and not self._filler.done():
            await asyncio.shield(self._filler)
            self.start()  # rows that came while it finished

    async def lookup(
        self,
        body: Mapping[str, Any],
        *,
        model: str,
        tenant: str,
        trace: Stage = NO_STAGE,
    ) -> SemanticMatch | None:
        """A cached question meaning the same as the request's last user turn, or None.

        In a script where the target admits only a repeated question, the lookup is decided
        by the question's text: a repeat is served and a miss is final, without an
        embedding."""
        query = split_chat(body, model=model, tenant=tenant)
        if query is None:
            self.counters["skipped_not_cacheable"] += 1
            return None
        if freshness.ttl_s(query.text, policy=self.config.freshness) <= 0:
            self.counters["skipped_volatile"] += 1
            return None
        self.start()
        try:
            if self._repeat_only_scripts:
                script = script_of(query.text)
                if script in self._repeat_only_scripts:
                    args = (query.partition_key, query.text, script)
                    repeat = await self._run(self._repeat_lookup_sync, *args)
                    if repeat is None:
                        self._count_decision(script, matcher.NOT_REPEATED)
                    return repeat
            with trace.child("embedding") as embedding:
                vector = await self.embedder.embed(query.text)
                embedding.set("hasten.embedder", self._embedder_name)
            return await self._run(self._lookup_sync, query.partition_key, query.text, vector)
        except Exception:  # a cache must never fail the request it could not speed up
            self._note_error("lookup")
            return None

    async def insert(
        self,
        body: Mapping[str, Any],
        *,
        model: str,
        tenant: str,
        answer_key: str,
        ttl_s: float | None = None,
    ) -> int | None:
        """Remembers the request's last user turn as answered under ``answer_key``.

        The TTL is the smaller of ``ttl_s`` (the model's) and the question's freshness TTL.
        Returns the entry id, or None if not cacheable by meaning.
        """
        return await self.insert_entry(NewEntry(body, model, tenant, answer_key, ttl_s))

    async def insert_entry(self, item: NewEntry) -> int | None:
        """``insert`` of a ``NewEntry``."""
        row = self._prepare(item)
        if row is None:
            return None
        self.start()
        try:
            vector = await self.embedder.embed(row.text)
            shared_id = None if self.replica is None else await self.replica.shared.next_id()
            entry_id = await self._run(self._insert_sync, row, vector, shared_id)
        except Exception:
            self._note_error("insert")
            return None
        if self.replica is not None and shared_id is not None:
            await self.replica.publish_insert(SharedEntry(entry_id, row, vector_bytes(vector)))
        return entry_id

    async def insert_many(self, items: Sequence[NewEntry]) -> int:
        """``insert`` for many questions at once (an import): embedded in batches, written
        one transaction per chunk. Returns how many were indexed."""
        if self.replica is not None:
            return await self._insert_each(items)
        rows = [row for item in items if (row := self._prepare(item)) is not None]
        num_inserted = 0
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            try:
                vectors = await self._import_vectors(chunk)
                num_inserted += await self._run(self._insert_many_sync, chunk, vectors)
            except Exception:
                self._note_error("insert")
        self.start()  # the rows stored without a vector get theirs in the background
        return num_inserted

    async def _import_vectors(self, rows: Sequence[Row]) -> list[Vector | None]:
        """The vectors an import must have now: where only a repeated question is served, a
        row is found by its text, so its vector (the model's time, ~15 ms a question here)
        is left to ``_fill`` (None) and the import is bound by the file, not the model."""
        is_later = [script_of(row.text) in self._repeat_only_scripts for row in rows]
        texts = [row.text for row, later in zip(rows, is_later, strict=True) if not later]
        embedded = iter(await self.embedder.embed_many(texts) if texts else [])
        return [None if later else next(embedded) for later in is_later]

    async def _fill(self) -> None:
        """Gives every row waiting for its vector one, a few per model call, until none wait."""
        while rows := await self._run(self._pending_sync):
            try:
                vectors = await self.embedder.embed_many([text for _, _, text in rows])
                await self._run(self._fill_sync, rows, vectors)
            except Exception:  # the rows keep waiting: retried by a start after a pause
                self._note_error("vector_fill")
                self._fill_retry_at = time.monotonic() + _FILL_RETRY_S
                return

    async def _insert_each(self, items: Sequence[NewEntry]) -> int:
        """With a shared tier every entry needs a shared id and an event of its own: one
        ``insert`` each, after a chunk's questions were embedded together (remembered)."""
        num_inserted = 0
        for start in range(0, len(items), _INSERT_CHUNK):
            chunk = items[start : start + _INSERT_CHUNK]
            queries = [split_chat(i.body, model=i.model, tenant=i.tenant) for i in chunk]
            with contextlib.suppress(Exception):  # each insert below embeds (or fails) alone
                await self.embedder.embed_many([q.text for q in queries if q is not None])
            for item in chunk:
                num_inserted += await self.insert_entry(item) is not None
        return num_inserted

    def _prepare(self, item: NewEntry) -> Row | None:
        """The row to store, stored now; None when it is not cacheable by meaning. Its TTL is
        the smaller of ``ttl_s`` and the question's freshness TTL."""
        query = split_chat(item.body, model=item.model, tenant=item.tenant)
        if query is None:
            return None
        entry_ttl_s = freshness.ttl_s(query.text, policy=self.config.freshness)
        if item.ttl_s is not None:
            entry_ttl_s = min(entry_ttl_s, item.ttl_s)
        if entry_ttl_s <= 0:
            self.counters["insert_skipped_volatile"] += 1
            return None
        now = self._clock()
        return Row(
            query.partition_key,
            item.tenant,
            item.model,
            query.text,
            item.answer_key,
            now,
            now + entry_ttl_s,
        )

    async def invalidate(
        self,
        *,
        entry_id: int | None = None,
        tenant: str | None = None,
        model: str | None = None,
        older_than_s: float | None = None,
    ) -> int:
        """Removes entries matching every given condition (all of them if none); the count."""
        created_before = None if older_than_s is None else self._clock() - older_than_s
        event = DeleteEvent(
            {"entry_id": entry_id, "tenant": tenant, "model": model}, created_before
        )
        rows = await self._run(self._delete_sync, event)
        # Local-only ids (made while Redis was away) are reused across replicas: not shared.
        is_local_only = entry_id is not None and entry_id >= LOCAL_ID_BASE
        if self.replica is not None and not is_local_only:
            await self.replica.share_delete(event, [i for i, _ in rows])
        return len(rows)

    async def count_entries(self, *, tenant: str | None = None, entry_id: int | None = None) -> int:
        """Entries matching every given condition (a tenant's, or one id within a tenant)."""
        return await self._run(lambda: self._open().count_where(tenant=tenant, entry_id=entry_id))

    def _note_error(self, operation: str) -> None:
        self.counters[f"{operation}_errors"] += 1
        if self.counters[f"{operation}_errors"] == 1:  # the first of a kind is enough
            _LOG.warning("semantic cache %s failed", operation, exc_info=True)

    def stats(self) -> dict[str, Any]:
        """Counters for the admin endpoint and benchmarks."""
        report: dict[str, Any] = dict(self.counters)
        report.update(
            entries=self._upkeep.num_entries,
            bytes=self._upkeep.num_bytes,
            min_similarity=None if self.policy.calibration else self.policy.min_similarity,
            target_precision=(
                round(1.0 - self.policy.max_risk, 6) if self.policy.calibration else None
            ),
            embedder=self._embedder_name,
            vectors_pending=self._num_pending,
            by_script=self.script_stats(),
            embed_batches=self.embedder.num_batches,
            embedded_texts=self.embedder.num_embedded,
            embed_ms=round(self.embedder.embed_s * 1e3, 3),
            embed_cpu_ms=round(self.embedder.embed_cpu_s * 1e3, 3),
        )
        if self.replica is not None and self.replica.is_following:
            report["shared"] = self.replica.stats()
        return report

    def script_stats(self) -> dict[str, dict[str, int]]:
        """Lookups by the question's script (latin, cjk, other): hits, misses, reasons."""
        return {
            name: {"hits": r[matcher.HIT], "misses": r.total() - r[matcher.HIT], **r}
            for name, r in sorted(self._by_script.items())
        }

    async def close(self) -> None:
        """Stops following and filling vectors (rows still waiting get theirs after the next
        start), saves large partitions' graphs and closes the file."""
        if self.replica is not None:
            await self.replica.close()
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        await self._run(self._close_sync)
        self._executor.shutdown(wait=True)
        await self.embedder.close()

    # --- the replica's access to the local copy (``replica.ReplicaStore``) ---

    async def read_meta(self, key: str, parse: Callable[[bytes | None], _R]) -> _R:
        return await self._run(lambda: parse(self._open().get_meta(key)))

    async def update_meta(self, key: str, change: Callable[[bytes | None], bytes]) -> None:
        def update() -> None:
            records = self._open()
            records.set_meta(key, change(records.get_meta(key)))

        await self._run(update)

    async def apply_shared(self, events: Sequence[Event]) -> None:
        await self._run(self._apply_sync, events)

    async def keep_only_shared(self, shared_ids: set[int]) -> None:
        await self._run(self._keep_only_sync, shared_ids)

    # --- worker thread only below ---

    async def _run(self, operation: Callable[..., _R], *args: Any) -> _R:
        return await asyncio.get_running_loop().run_in_executor(self._executor, operation, *args)

    def _open(self) -> Records:
        if self._records is not None:
            return self._records
        records = Records(self.config.path)
        stored_name = records.get_meta("embedder")
        identity = orjson.dumps({"name": self._embedder_name, "dim": self._dim})
        if stored_name is not None and stored_name != identity:
            _LOG.warning("semantic cache: embedder changed, dropping vectors of %s", stored_name)
            records.clear()
            self._index.drop_saved()
        records.set_meta("embedder", identity)
        self._upkeep.recount(records)
        self._num_pending = records.count_pending()
        self._records = records
        return records

    def _partition(self, records: Records, partition: str) -> None:
        """Loads a partition on first use: saved graph if it matches the rows, else rebuild."""
        if partition in self._loaded:
            return
        self._loaded.add(partition)
        digest = records.partition_digest(partition)
        if digest[0] == 0:
            return
        if self._index.load_saved(partition, digest):
            return
        ids, vectors = records.partition_vectors(partition, self._dim)
        self._index.load_partition(partition, ids, vectors)
        self.counters["partitions_rebuilt"] += 1

    def _lookup_sync(self, partition: str, text: str, vector: Vector) -> SemanticMatch | None:
        records = self._open()
        self._partition(records, partition)
        now = self._clock()
        found = self._index.search(partition, vector, self.config.num_candidates)
        stored = records.entries([i for i, sim in found if sim >= self.policy.floor])
        live = {e.entry_id: e for e in self._upkeep.live(records, stored.values(), now)}
        candidates = [
            matcher.Candidate(i, sim, self._upkeep.signature(live[i]), live[i].answer_key)
            for i, sim in found
            if i in live
        ]
        choice = matcher.choose(signature(text), candidates, self.policy)
        self._count_decision(choice.script or "latin", choice.reason)
        if choice.guard_reason is not None:
            self.counters[f"guard_{choice.guard_reason}"] += 1
        best = choice.candidate
        if not choice.is_hit or best is None:
            return None
        match = SemanticMatch(
            best.entry_id, best.similarity, best.answer_key, risk=choice.risk, script=choice.script
        )
        return self._served(records, live[best.entry_id], match, now)

    def _repeat_lookup_sync(self, partition: str, text: str, script: str) -> SemanticMatch | None:
        """The hit where only a repeated question can be served: the oldest live entry whose
        question is ``text`` too (both ``partition.trimmed``); None if there is none. The
        embedding path serves the same row: an equal text is its nearest (ties go to the
        lowest id)."""
        if not self.policy.serves_repeats:  # a target above even a repeat's bound
            return None
        records = self._open()
        now = self._clock()
        live = self._upkeep.live(records, records.entries_with_text(partition, text), now)
        if not live:
            return None
        self._count_decision(script, matcher.HIT)
        assert self.policy.calibration is not None  # serves_repeats
        risk = 1.0 - self.policy.calibration.identical_precision
        # The texts are the same: 1.0 is their similarity (the embedder was not asked).
        match = SemanticMatch(live[0].entry_id, 1.0, live[0].answer_key, risk=risk, script=script)
        return self._served(records, live[0], match, now)

    def _count_decision(self, script: str, reason: str) -> None:
        self.counters[f"lookup_{reason}"] += 1
        self._by_script[script][reason] += 1

    def _served(
        self, records: Records, entry: StoredEntry, match: SemanticMatch, now: float
    ) -> SemanticMatch:
        """A hit on ``entry``: touched and counted."""
        records.touch(entry.entry_id, now)
        self.counters["hits"] += 1
        return match

    def _insert_sync(self, row: Row, vector: Vector, entry_id: int | None) -> int:
        records = self._open()
        if entry_id is None and self.replica is not None:  # Redis away: a local-only id
            entry_id = records.next_id_from(LOCAL_ID_BASE)
        entry_id = self._add_row(records, row, vector, entry_id)
        self.counters["inserts"] += 1
        return entry_id

    def _insert_many_sync(self, rows: Sequence[Row], vectors: Sequence[Vector | None]) -> int:
        records = self._open()
        added: list[tuple[str, int]] = []
        try:
            with records.transaction():
                for row, vector in zip(rows, vectors, strict=True):
                    added.append((row.partition, self._add_row(records, row, vector)))
        except Exception:
            # The rows were rolled back: so go their vectors (an eviction that was rolled back
            # too leaves a row unindexed until the partition is next rebuilt: a lost hit only).
            for partition, entry_id in added:
                self._index.remove(partition, entry_id)
            self._upkeep.recount(records)
            raise
        self.counters["inserts"] += len(rows)
        self._num_pending += sum(vector is None for vector in vectors)
        return len(rows)

    def _pending_sync(self) -> list[tuple[int, str, str]]:
        records = self._open()
        self._num_pending = records.count_pending()
        return records.pending(_FILL_BATCH)

    def _fill_sync(self, rows: Sequence[tuple[int, str, str]], vectors: Sequence[Vector]) -> None:
        records = self._open()
        with records.transaction():
            filled = [
                (partition, entry_id, vector)
                for (entry_id, partition, _), vector in zip(rows, vectors, strict=True)
                if records.set_vector(entry_id, vector)  # else removed while it waited
            ]
        for partition, entry_id, vector in filled:
            if partition in self._loaded:  # else loaded from the file on first use
                self._index.add(partition, entry_id, vector)
        self.counters["vectors_filled"] += len(filled)
        self._num_pending = max(0, self._num_pending - len(rows))

    def _add_row(
        self,
        records: Records,
        row: Row,
        vector: Vector | None,
        entry_id: int | None = None,
        *,
        is_loaded_first: bool = True,
    ) -> int:
        """One row into the file and the index (its partition loaded first, unless
        ``is_loaded_first`` is False: then it is indexed only if already loaded, else read
        from the file on first use); its id. Without a vector, into the file only (it waits
        for ``_fill``)."""
        if vector is not None and is_loaded_first:
            self._partition(records, row.partition)
        entry_id = records.insert(row, vector, entry_id)
        if vector is not None and row.partition in self._loaded:
            self._index.add(row.partition, entry_id, vector)
        self._upkeep.note_insert(records, row.text, self._clock())
        return entry_id

    def _apply_sync(self, events: Sequence[Event]) -> None:
        """Another replica's inserts and invalidations, idempotently."""
        records = self._open()
        now = self._clock()
        for event in events:
            if isinstance(event, DeleteEvent):
                self._delete_sync(event, reason="invalidated_shared")
            elif event is not None and event.row.expires_at > now:
                if records.has(event.entry_id):
                    continue
                vector = vector_of(event.vector_f16)
                # Not loaded for it: a partition this replica never looks up stays unloaded.
                self._add_row(records, event.row, vector, event.entry_id, is_loaded_first=False)
                self.counters["shared_applied"] += 1

    def _keep_only_sync(self, shared_ids: set[int]) -> None:
        records = self._open()
        rows = records.select_where(ids_below=LOCAL_ID_BASE)
        self._upkeep.remove(records, [row for row in rows if row[0] not in shared_ids], "dropped")

    def _delete_sync(
        self, event: DeleteEvent, reason: str = "invalidated"
    ) -> list[tuple[int, str]]:
        records = self._open()
        rows = records.select_where(created_before=event.created_before, **event.where)
        self._upkeep.remove(records, rows, reason)
        return rows

    def _close_sync(self) -> None:
        if self._records is None:
            return
        self._index.save_graphs(self._records.partition_digest)
        self._records.close()
        self._records = None

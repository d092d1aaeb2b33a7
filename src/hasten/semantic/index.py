"""Vectors by partition: exact search while a partition is small, HNSW (usearch) once it grows.

Every partition key (model, tenant, system prompt, history...) gets its own index, so a
search never scans or filters other conversations' entries. Most partitions are tiny (one
conversation's follow-ups) and an exact dot product over a few thousand rows takes tens of
microseconds; partitions beyond ``max_flat_entries`` move to a usearch HNSW graph, which
answers in well under a millisecond at a million entries. Not thread-safe: the store calls
it from one worker thread.

HNSW graphs are saved in ``graph_dir`` (one ``<partition>.usearch`` file each, and a
manifest of the row count and id sum each was saved at). A graph is only a faster way to
search vectors that SQLite already holds, so a missing, corrupt or stale file is never an
error: the partition is rebuilt from the stored vectors.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

Vector = npt.NDArray[np.float32]

DEFAULT_MAX_FLAT_ENTRIES = 4096
_MANIFEST = "manifest.json"


@dataclass(slots=True)
class _Flat:
    """Exact search: a growing matrix plus the entry id of each row."""

    dim: int
    vectors: npt.NDArray[np.float32] = field(init=False)
    ids: npt.NDArray[np.int64] = field(init=False)
    rows: dict[int, int] = field(default_factory=dict)
    num_rows: int = 0

    def __post_init__(self) -> None:
        self.vectors = np.zeros((16, self.dim), dtype=np.float32)
        self.ids = np.zeros(16, dtype=np.int64)

    def add(self, entry_id: int, vector: Vector) -> None:
        if entry_id in self.rows:
            self.vectors[self.rows[entry_id]] = vector
            return
        if self.num_rows == len(self.ids):
            self.vectors = np.concatenate([self.vectors, np.zeros_like(self.vectors)])
            self.ids = np.concatenate([self.ids, np.zeros_like(self.ids)])
        self.vectors[self.num_rows] = vector
        self.ids[self.num_rows] = entry_id
        self.rows[entry_id] = self.num_rows
        self.num_rows += 1

    def remove(self, entry_id: int) -> bool:
        row = self.rows.pop(entry_id, None)
        if row is None:
            return False
        last = self.num_rows - 1
        if row != last:  # move the last row into the hole to stay contiguous
            self.vectors[row] = self.vectors[last]
            self.ids[row] = self.ids[last]
            self.rows[int(self.ids[row])] = row
        self.num_rows = last
        return True

    def search(self, vector: Vector, k: int) -> list[tuple[int, float]]:
        if self.num_rows == 0:
            return []
        similarities = self.vectors[: self.num_rows] @ vector
        count = min(k, self.num_rows)
        top = np.argpartition(-similarities, count - 1)[:count]
        top = top[np.argsort(-similarities[top], kind="stable")]
        return [(int(self.ids[row]), float(similarities[row])) for row in top]


class _Hnsw:
    """Approximate search on a usearch graph with half-precision vectors."""

    def __init__(self, dim: int) -> None:
        from usearch.index import Index

        self.index: Any = Index(
            ndim=dim,
            metric="ip",
            dtype="f16",
            connectivity=16,
            expansion_add=128,
            expansion_search=64,
        )

    def add_many(self, ids: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        if len(ids):
            # Bulk (re)builds are one-off and block their partition anyway: use every core.
            self.index.add(ids.astype(np.uint64), vectors, threads=os.cpu_count() or 1)

    def add(self, entry_id: int, vector: Vector) -> None:
        if self.index.contains(entry_id):
            self.index.remove(entry_id)
        self.index.add(entry_id, vector, threads=1)

    def remove(self, entry_id: int) -> bool:
        return bool(self.index.remove(entry_id))

    def search(self, vector: Vector, k: int) -> list[tuple[int, float]]:
        if len(self.index) == 0:
            return []
        found = self.index.search(vector, k, threads=1)
        # usearch's "ip" metric reports 1 - dot product as the distance.
        return [
            (int(key), 1.0 - float(distance))
            for key, distance in zip(found.keys, found.distances, strict=True)
        ]

    def __len__(self) -> int:
        return len(self.index)


class VectorIndex:
    """Per-partition nearest-neighbour search over unit vectors (dot product = cosine)."""

    def __init__(
        self,
        dim: int,
        *,
        max_flat_entries: int = DEFAULT_MAX_FLAT_ENTRIES,
        graph_dir: Path | None = None,
    ) -> None:
        self.dim = dim
        self.max_flat_entries = max_flat_entries
        self.graph_dir = graph_dir  # None: graphs are never saved
        self._partitions: dict[str, _Flat | _Hnsw] = {}
        self._manifest: dict[str, list[int]] | None = None

    def partition_size(self, partition: str) -> int:
        index = self._partitions.get(partition)
        if index is None:
            return 0
        return index.num_rows if isinstance(index, _Flat) else len(index)

    def load_partition(
        self, partition: str, ids: Sequence[int] | npt.NDArray[np.int64], vectors: Vector
    ) -> None:
        """Replaces a partition with these rows (used when rebuilding from stored vectors)."""
        id_array = np.asarray(ids, dtype=np.int64)
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(id_array), self.dim)
        if len(id_array) > self.max_flat_entries:
            graph = _Hnsw(self.dim)
            graph.add_many(id_array, matrix)
            self._partitions[partition] = graph
            return
        flat = _Flat(self.dim)
        for entry_id, vector in zip(id_array, matrix, strict=True):
            flat.add(int(entry_id), vector)
        self._partitions[partition] = flat

    def load_saved(self, partition: str, digest: tuple[int, int]) -> bool:
        """Uses the graph saved for ``partition`` if it was saved at exactly these rows
        (``Records.partition_digest``); False if there is none or it cannot be read."""
        graph_dir = self.graph_dir
        if graph_dir is None or tuple(self._saved(graph_dir).get(partition, ())) != digest:
            return False
        graph = _Hnsw(self.dim)
        try:
            graph.index.load(str(graph_dir / f"{partition}.usearch"))
        except Exception:  # missing, corrupt or foreign file: the caller rebuilds
            return False
        if graph.index.ndim != self.dim:
            return False
        self._partitions[partition] = graph
        return True

    def save_graphs(self, digest: Callable[[str], tuple[int, int]]) -> None:
        """Writes every HNSW partition's graph, recorded with ``digest(partition)``."""
        graph_dir = self.graph_dir
        if graph_dir is None:
            return
        manifest = self._saved(graph_dir)
        for partition, index in self._partitions.items():
            if isinstance(index, _Hnsw):
                # Each file written beside and renamed: a crash never leaves half a graph.
                graph_dir.mkdir(parents=True, exist_ok=True)
                index.index.save(str(graph_dir / f"{partition}.usearch.tmp"))
                (graph_dir / f"{partition}.usearch.tmp").replace(graph_dir / f"{partition}.usearch")
                manifest[partition] = list(digest(partition))
                (graph_dir / f"{_MANIFEST}.tmp").write_bytes(orjson.dumps(manifest))
                (graph_dir / f"{_MANIFEST}.tmp").replace(graph_dir / _MANIFEST)

    def drop_saved(self) -> None:
        """Deletes every saved graph (the vectors they index are gone)."""
        self._manifest = {}
        if self.graph_dir is not None:
            shutil.rmtree(self.graph_dir, ignore_errors=True)

    def _saved(self, graph_dir: Path) -> dict[str, list[int]]:
        """The manifest: the digest each saved graph was saved at, by partition."""
        if self._manifest is None:
            self._manifest = {}
            with contextlib.suppress(OSError, orjson.JSONDecodeError):
                loaded = orjson.loads((graph_dir / _MANIFEST).read_bytes())
                if isinstance(loaded, dict):
                    self._manifest = loaded
        return self._manifest

    def add(self, partition: str, entry_id: int, vector: Vector) -> None:
        index = self._partitions.get(partition)
        if index is None:
            index = _Flat(self.dim)
            self._partitions[partition] = index
        index.add(entry_id, vector)
        if isinstance(index, _Flat) and index.num_rows > self.max_flat_entries:
            graph = _Hnsw(self.dim)
            graph.add_many(index.ids[: index.num_rows], index.vectors[: index.num_rows])
            self._partitions[partition] = graph

    def remove(self, partition: str, entry_id: int) -> bool:
        index = self._partitions.get(partition)
        if index is None:
            return False
        is_removed = index.remove(entry_id)
        if self.partition_size(partition) == 0:
            del self._partitions[partition]
        return is_removed

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        """Up to ``k`` (entry id, cosine) pairs, most similar first."""
        index = self._partitions.get(partition)
        if index is None:
            return []
        return index.search(np.asarray(vector, dtype=np.float32), k)

"""Saved HNSW graphs of large partitions, beside the SQLite file.

A graph is only a faster way to search vectors that SQLite already holds, so a missing,
corrupt or stale file is never an error: the partition is rebuilt from the stored vectors.
A manifest records, per partition, the row count and id sum the graph was saved at.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import orjson

from hasten.semantic.index import VectorIndex

_MANIFEST = "manifest.json"


class GraphFiles:
    """One ``<partition>.usearch`` file per large partition plus a manifest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._manifest: dict[str, list[int]] | None = None

    def find(self, partition: str, digest: tuple[int, int]) -> Path | None:
        """The saved graph of ``partition`` if it was saved at exactly these rows."""
        saved = self._read_manifest().get(partition)
        path = self.directory / f"{partition}.usearch"
        if saved is None or tuple(saved) != digest or not path.exists():
            return None
        return path

    def save(self, index: VectorIndex, partition: str, digest: tuple[int, int]) -> None:
        manifest = self._read_manifest()
        if index.save_graph(partition, self.directory / f"{partition}.usearch"):
            manifest[partition] = list(digest)
            temporary = self.directory / (_MANIFEST + ".tmp")
            temporary.write_bytes(orjson.dumps(manifest))
            temporary.replace(self.directory / _MANIFEST)

    def clear(self) -> None:
        self._manifest = {}
        shutil.rmtree(self.directory, ignore_errors=True)

    def _read_manifest(self) -> dict[str, list[int]]:
        if self._manifest is None:
            self._manifest = {}
            with contextlib.suppress(OSError, orjson.JSONDecodeError):
                loaded = orjson.loads((self.directory / _MANIFEST).read_bytes())
                if isinstance(loaded, dict):
                    self._manifest = loaded
        return self._manifest

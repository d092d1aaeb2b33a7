"""Where virtual keys live: the store protocol, and the in-memory store.

Every store finds an active key by its secret's digest (an index, not a scan), reads and
lists records by id, adds one under a bound on their number, and replaces one only if it
is still what the caller read (compare and swap: two admins rotating the same key at once
cannot both win). A backend that fails raises ``KeyStoreUnavailable``; a record that fails
its checksum raises ``DamagedKeyRecord`` from ``find`` and ``get`` and is left out of
``list_all`` (logged).
"""

from __future__ import annotations

from typing import Protocol

from hasten.keys.record import KeyRecord


class KeyStore(Protocol):
    """What the key directory and the admin API need of a store."""

    @property
    def kind(self) -> str:
        """``memory``, ``sqlite`` or ``redis`` (for logs and ``/admin/keys``)."""
        ...

    async def find(self, digest: bytes) -> KeyRecord | None:
        """The active (unrevoked) key whose secret has this SHA-256 digest."""
        ...

    async def get(self, key_id: str) -> KeyRecord | None: ...

    async def list_all(self) -> list[KeyRecord]:
        """Every record, revoked ones included, oldest first."""
        ...

    async def add(self, record: KeyRecord, *, max_keys: int) -> bool:
        """Stores a new record; False when ``max_keys`` records exist already."""
        ...

    async def replace(self, old: KeyRecord, new: KeyRecord) -> bool:
        """Writes ``new`` over ``old`` (same id); False if the stored one is not ``old``."""
        ...

    async def aclose(self) -> None: ...


class MemoryKeyStore:
    """Keys in this process only: they vanish on restart, and other processes never see
    them (the app says so in a log line; ``[keys] sqlite_path`` or ``[fleet] redis_url``
    keeps them)."""

    kind = "memory"

    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}
        self._by_digest: dict[bytes, str] = {}

    async def find(self, digest: bytes) -> KeyRecord | None:
        key_id = self._by_digest.get(digest)
        return None if key_id is None else self._records[key_id]

    async def get(self, key_id: str) -> KeyRecord | None:
        return self._records.get(key_id)

    async def list_all(self) -> list[KeyRecord]:
        return list(self._records.values())

    async def add(self, record: KeyRecord, *, max_keys: int) -> bool:
        if len(self._records) >= max_keys or record.key_id in self._records:
            return False
        self._records[record.key_id] = record
        if not record.is_revoked:
            self._by_digest[record.secret_sha256] = record.key_id
        return True

    async def replace(self, old: KeyRecord, new: KeyRecord) -> bool:
        if self._records.get(old.key_id) != old:
            return False
        self._records[new.key_id] = new
        self._by_digest.pop(old.secret_sha256, None)
        if not new.is_revoked:
            self._by_digest[new.secret_sha256] = new.key_id
        return True

    async def aclose(self) -> None:
        return None

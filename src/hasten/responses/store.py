"""Where stored responses live: the store protocol, and the in-memory store.

Every store is scoped to the tenant (a record is found by tenant and id together: another
tenant's id is a miss), drops a record at its ``expires_s``, refuses one larger than its
bound, and keeps its total bytes under ``max_bytes`` by dropping the oldest records first.
A store never raises into a request: a failing backend logs, reads miss and writes drop.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from hasten.responses.record import StoredResponse, encode


class ResponseStore(Protocol):
    @property
    def kind(self) -> str:
        """``memory``, ``sqlite`` or ``redis`` (for logs)."""

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's unexpired record of ``response_id``; None for any other."""

    async def put(self, record: StoredResponse) -> bool:
        """Keeps ``record`` until it expires; False when it was not kept (too large, or
        the backend failed)."""

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Removes the tenant's record; True if there was one."""

    async def aclose(self) -> None: ...


class MemoryResponseStore:
    """Records in this process only (gone on restart): insertion order is age order, so
    the oldest go first past ``max_bytes``."""

    kind = "memory"

    def __init__(
        self,
        *,
        max_bytes: int,
        max_record_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self._clock = clock
        # (tenant, id) -> (record, its size); the record is kept as is (frozen).
        self._records: OrderedDict[tuple[str, str], tuple[StoredResponse, int]] = OrderedDict()
        self.num_bytes = 0

    def __len__(self) -> int:
        return len(self._records)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        found = self._records.get((tenant, response_id))
        if found is None:
            return None
        record = found[0]
        if not record.is_fresh(self._clock()):
            self._drop((tenant, response_id))
            return None
        return record

    async def put(self, record: StoredResponse) -> bool:
        size = len(encode(record))  # what a persistent store would hold: one bound for all
        if size > self.max_record_bytes:
            return False
        key = (record.tenant, record.response_id)
        self._drop(key)
        self._records[key] = (record, size)
        self.num_bytes += size
        now = self._clock()
        while self.num_bytes > self.max_bytes or (
            self._records and not next(iter(self._records.values()))[0].is_fresh(now)
        ):
            self._drop(next(iter(self._records)))
        return True

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._drop((tenant, response_id))

    async def aclose(self) -> None:
        self._records.clear()
        self.num_bytes = 0

    def _drop(self, key: tuple[str, str]) -> bool:
        found = self._records.pop(key, None)
        if found is None:
            return False
        self.num_bytes -= found[1]
        return True

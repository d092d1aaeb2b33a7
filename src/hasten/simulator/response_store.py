"""Responses the simulator keeps, as OpenAI does for ``store: true``: a later request's
``previous_response_id`` continues from one, ``GET``/``DELETE /v1/responses/{id}`` read and
remove one. Bounded by bytes; the least recently used go first."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[Any]  # the whole conversation's input up to it, as items

    def history(self) -> list[Any]:
        """What a follow-up continues from: this response's input, then its output."""
        return [*self.input_items, *self.response.get("output", [])]


class ResponseStore:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self.num_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response: dict[str, Any], input_items: list[Any]) -> None:
        """Keeps ``response`` (if it fits at all), evicting the oldest to make room."""
        response_id = response["id"]
        data = orjson.dumps({"response": response, "input": input_items})
        self.delete(response_id)
        if len(data) > self.max_bytes:
            return
        self._entries[response_id] = data
        self.num_bytes += len(data)
        self._evict()

    def get(self, response_id: str) -> StoredResponse | None:
        data = self._entries.get(response_id)
        if data is None:
            return None
        self._entries.move_to_end(response_id)
        entry = orjson.loads(data)
        return StoredResponse(entry["response"], entry["input"])

    def delete(self, response_id: str) -> bool:
        data = self._entries.pop(response_id, None)
        if data is None:
            return False
        self.num_bytes -= len(data)
        return True

    def clear(self) -> None:
        self._entries.clear()
        self.num_bytes = 0

    def resize(self, max_bytes: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self._evict()

    def _evict(self) -> None:
        while self.num_bytes > self.max_bytes and self._entries:
            _, data = self._entries.popitem(last=False)
            self.num_bytes -= len(data)

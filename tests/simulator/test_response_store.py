"""The simulator's stored Responses: bounded by bytes, least recently used first out."""

from __future__ import annotations

from typing import Any

import orjson

from hasten.simulator.response_store import ResponseStore


def response(response_id: str, text: str = "hi") -> dict[str, Any]:
    output = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    ]
    return {"id": response_id, "object": "response", "output": output}


def test_put_get_history_delete() -> None:
    store = ResponseStore(max_bytes=10_000)
    question = [{"type": "message", "role": "user", "content": "q"}]
    store.put(response("resp_1"), question)
    stored = store.get("resp_1")
    assert stored is not None and stored.response == response("resp_1")
    assert stored.history() == [*question, *response("resp_1")["output"]]
    assert store.get("resp_2") is None
    assert store.delete("resp_1") and not store.delete("resp_1")
    assert len(store) == 0 and store.num_bytes == 0


def test_bounded_by_bytes_oldest_out() -> None:
    one = len(orjson.dumps({"response": response("resp_1"), "input": []}))
    store = ResponseStore(max_bytes=2 * one)
    store.put(response("resp_1"), [])
    store.put(response("resp_2"), [])
    assert store.get("resp_1") is not None  # now the most recent
    store.put(response("resp_3"), [])
    assert store.get("resp_2") is None and store.get("resp_1") is not None
    assert store.num_bytes <= 2 * one
    store.put(response("resp_big", "x" * 10 * one), [])  # never fits: not kept
    assert store.get("resp_big") is None and len(store) == 2
    store.resize(0)
    assert len(store) == 0 and store.num_bytes == 0

"""hasten.responses.state: the keeper stores a complete answer before its end goes out and
forwards every byte unchanged however the answer is cut; the chain expands oldest first,
with the bounds and the 404s of OpenAI's shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis import responses
from hasten.errors import InvalidRequest, PayloadTooLarge, ResponseNotFound
from hasten.proxy.ports import NOT_KEPT
from hasten.responses.record import StoredResponse
from hasten.responses.state import ResponseState
from hasten.responses.store import MemoryResponseStore
from hasten.wire.asgi import Message

REQUEST = orjson.dumps({"model": "m", "input": "hi"})
ANSWER = {
    "id": "resp_abc",
    "object": "response",
    "status": "completed",
    "model": "m",
    "output": [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hello there", "annotations": []}],
        }
    ],
}


class WatchedStore(MemoryResponseStore):
    """A memory store that notes, at each write, what the client had been sent so far."""

    def __init__(self, sent: list[bytes], **bounds: int) -> None:
        super().__init__(
            max_bytes=bounds.get("max_bytes", 1 << 20),
            max_record_bytes=bounds.get("max_record_bytes", 1 << 16),
        )
        self.sent = sent
        self.seen_at_put: list[bytes] = []

    async def put(self, record: StoredResponse) -> bool:
        self.seen_at_put.append(b"".join(self.sent))
        return await super().put(record)


def _state(
    store: MemoryResponseStore,
    *,
    max_record_bytes: int = 1 << 16,
    max_history_bytes: int = 1 << 20,
    max_chain_depth: int = 10,
) -> ResponseState:
    return ResponseState(
        store,
        ttl_s=60.0,
        max_record_bytes=max_record_bytes,
        max_history_bytes=max_history_bytes,
        max_chain_depth=max_chain_depth,
        max_json_depth=64,
    )


def _stream_bytes(answer: dict[str, Any]) -> bytes:
    return b"".join(responses.frame(event) for event in responses.body_to_events(answer))


async def _serve(
    state: ResponseState,
    chunks: list[bytes],
    *,
    request: bytes = REQUEST,
    status: int = 200,
    content_type: bytes = b"text/event-stream",
    tenant: str = "t",
    upstream: bytes | None = None,
) -> list[bytes]:
    sent: list[bytes] = []
    if isinstance(state.store, WatchedStore):
        state.store.sent = sent
    raw, kept = await state.open("responses", tenant, request)
    assert raw == request

    async def client(message: Message) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])
            if not message.get("more_body", False):
                sent.append(b"<end>")

    send = kept.wrap(client, orjson.loads(request))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                *([] if upstream is None else [(b"x-hasten-upstream", upstream)]),
            ],
        }
    )
    for index, chunk in enumerate(chunks):
        await send(
            {"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1}
        )
    return sent


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10_000), max_size=12))
async def test_a_stream_is_forwarded_unchanged_and_stored_before_its_end(cuts: list[int]) -> None:
    whole = _stream_bytes(ANSWER)
    points = sorted({cut % len(whole) for cut in cuts} - {0})
    chunks = [whole[a:b] for a, b in zip([0, *points], [*points, len(whole)], strict=True)]
    store = WatchedStore([])
    sent = await _serve(_state(store), chunks)
    assert b"".join(sent[:-1]) == whole and sent[-1] == b"<end>"
    assert len(store.seen_at_put) == 1
    before = store.seen_at_put[0]
    assert b"response.completed" not in before  # the end had not gone out
    assert b"response.output_text.done" in before  # what came before it had
    record = await store.get("t", "resp_abc")
    assert record is not None and record.output_items == ANSWER["output"]
    assert record.input_items == [{"type": "message", "role": "user", "content": "hi"}]


async def test_a_json_answer_is_stored_before_it_goes_out() -> None:
    store = WatchedStore([])
    body = orjson.dumps(ANSWER)
    sent = await _serve(
        _state(store), [body[:10], body[10:]], content_type=b"application/json", upstream=b"east"
    )
    assert b"".join(sent[:-1]) == body
    assert store.seen_at_put == [b""]  # nothing of the body was out at the write
    record = await store.get("t", "resp_abc")
    assert record is not None and record.upstream == "east" and record.response == ANSWER


@pytest.mark.parametrize(
    "case",
    ["failed", "cut", "error status", "store false", "too large", "not complete"],
)
async def test_nothing_is_stored_from_a_failed_partial_or_unstored_answer(case: str) -> None:
    store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16)
    state = _state(store, max_record_bytes=1 << 16)
    whole = _stream_bytes(ANSWER)
    chunks, request, status = [whole], REQUEST, 200
    if case == "failed":
        failed = responses.failed_event("boom", response={**ANSWER, "output": []})
        chunks = [whole.split(b"event: response.completed")[0], responses.frame(failed)]
    elif case == "cut":
        chunks = [whole[: len(whole) - 40]]
    elif case == "error status":
        status = 500
    elif case == "store false":
        request = orjson.dumps({"model": "m", "input": "hi", "store": False})
    elif case == "too large":
        store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=len(whole) // 4)
        state = _state(store, max_record_bytes=len(whole) // 4)
        chunks = [whole[i : i + 100] for i in range(0, len(whole), 100)]
    elif case == "not complete":
        answer = {**ANSWER, "status": "in_progress"}
        chunks, request = [orjson.dumps(answer)], REQUEST
        sent = await _serve(state, chunks, content_type=b"application/json")
        assert b"".join(sent[:-1]) == chunks[0]
        assert await store.get("t", "resp_abc") is None
        return
    sent = await _serve(state, chunks, request=request, status=status)
    assert b"".join(sent[:-1]) == b"".join(chunks)
    assert await store.get("t", "resp_abc") is None


async def test_other_apis_are_left_alone() -> None:
    state = _state(MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16))
    raw, kept = await state.open("chat", "t", b'{"previous_response_id": "resp_x"}')
    assert raw == b'{"previous_response_id": "resp_x"}' and kept is NOT_KEPT


def _record(response_id: str, previous: str | None, said: str, answered: str) -> StoredResponse:
    return StoredResponse(
        tenant="t",
        response_id=response_id,
        model="m",
        input_items=[{"type": "message", "role": "user", "content": said}],
        previous_response_id=previous,
        response={
            "id": response_id,
            "output": [{"type": "message", "role": "assistant", "content": answered}],
            "instructions": "be brief",
        },
        created_s=0.0,
        expires_s=1e18,
    )


async def _chain(store: MemoryResponseStore, length: int) -> None:
    previous = None
    for n in range(length):
        await store.put(_record(f"resp_{n}", previous, f"q{n}", f"a{n}"))
        previous = f"resp_{n}"


async def test_a_chain_expands_oldest_first_without_instructions() -> None:
    store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16)
    await _chain(store, 3)
    state = _state(store)
    request = orjson.dumps(
        {"model": "m", "input": "q3", "previous_response_id": "resp_2", "instructions": "new"}
    )
    raw, _ = await state.open("responses", "t", request)
    body = orjson.loads(raw)
    assert "previous_response_id" not in body and body["instructions"] == "new"
    said = [item["content"] for item in body["input"]]
    assert said == ["q0", "a0", "q1", "a1", "q2", "a2", "q3"]
    with pytest.raises(ResponseNotFound) as other:
        await state.open("responses", "another tenant", request)
    assert other.value.status_code == 404 and other.value.param == "previous_response_id"
    assert other.value.message == "Response with id 'resp_2' not found."


async def test_the_chain_is_bounded_in_depth_and_bytes() -> None:
    store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16)
    await _chain(store, 12)
    request = orjson.dumps({"model": "m", "input": "x", "previous_response_id": "resp_11"})
    with pytest.raises(InvalidRequest) as deep:
        await _state(store, max_chain_depth=10).open("responses", "t", request)
    assert deep.value.status_code == 400 and deep.value.param == "previous_response_id"
    with pytest.raises(PayloadTooLarge):
        await _state(store, max_history_bytes=200).open("responses", "t", request)
    raw, _ = await _state(store, max_chain_depth=12).open("responses", "t", request)
    assert len(orjson.loads(raw)["input"]) == 25


async def test_an_unstored_request_leaves_its_answer_unread() -> None:
    # store: false (Codex's every turn): the answer goes by the keeper's send untouched.
    state = _state(MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16))
    _, kept = await state.open("responses", "t", REQUEST)

    async def client(message: Message) -> None:
        pass

    assert kept.wrap(client, {"model": "m", "input": "hi", "store": False}) is client
    assert kept.wrap(client, {"model": "m", "input": "hi"}) is not client

"""hasten.responses.state: the keeper stores a complete answer before its end goes out and
forwards every byte unchanged however the answer is cut; the chain expands oldest first,
with the bounds and the 404s of OpenAI's shape."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis import responses
from hasten.errors import InvalidRequest, PayloadTooLarge, ResponseNotFound
from hasten.proxy.ports import NOT_KEPT
from hasten.proxy.validation import OFF_LOOP_BYTES
from hasten.responses.record import StoredResponse
from hasten.responses.state import ResponseState
from hasten.responses.store import MemoryResponseStore
from hasten.values.previous import PreviousResponse
from hasten.wire.asgi import Message, Send

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
    holders: frozenset[str] | None = None,
    kind: type[ResponseState] = ResponseState,
) -> ResponseState:
    return kind(
        store,
        ttl_s=60.0,
        max_record_bytes=max_record_bytes,
        max_history_bytes=max_history_bytes,
        max_chain_depth=max_chain_depth,
        max_json_depth=64,
        holders=holders,
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


async def test_a_follow_up_names_its_previous_response_and_its_holder() -> None:
    store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16)
    state = _state(store, holders=frozenset({"east"}))
    for upstream, answer_id in ((b"east", "resp_east"), (b"chatty", "resp_chatty")):
        answer = orjson.dumps({**ANSWER, "id": answer_id})
        await _serve(state, [answer], content_type=b"application/json", upstream=upstream)
    east = await store.get("t", "resp_east")
    chatty = await store.get("t", "resp_chatty")
    # A deployment that does not speak Responses translated its answer: the id is hasten's.
    assert east is not None and east.upstream == "east"
    assert chatty is not None and chatty.upstream is None
    for previous, holder in (("resp_east", "east"), ("resp_chatty", None)):
        request = orjson.dumps({"model": "m", "input": ["own"], "previous_response_id": previous})
        _, kept = await state.open("responses", "t", request)
        assert kept.previous == PreviousResponse(previous, ["own"], True, holder)
    _, kept = await state.open("responses", "t", REQUEST)
    assert kept.previous is None


def _collect(heads: list[Message], sent: list[bytes]) -> Send:
    async def client(message: Message) -> None:
        if message["type"] == "http.response.start":
            heads.append(message)
        else:
            sent.append(message["body"])

    return client


@pytest.mark.parametrize("store_field", [{}, {"store": False}])
async def test_a_follow_ups_answer_names_its_previous_response(store_field: dict[str, Any]) -> None:
    """Stream and JSON body: the upstream that got the expanded history echoes none; the
    JSON body's length is changed with it."""
    store = MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16)
    await store.put(_record("resp_0", None, "q0", "a0"))
    state = _state(store)
    request = orjson.dumps(
        {"model": "m", "input": "q1", "previous_response_id": "resp_0", **store_field}
    )
    answer = {**ANSWER, "previous_response_id": None}
    for chunks, content_type in (
        ([_stream_bytes(answer)], b"text/event-stream"),
        ([orjson.dumps(answer)], b"application/json"),
    ):
        heads: list[Message] = []
        sent: list[bytes] = []
        _, kept = await state.open("responses", "t", request)
        send = kept.wrap(_collect(heads, sent), orjson.loads(request))
        length = str(len(chunks[0])).encode()
        headers = [(b"content-type", content_type), (b"content-length", length)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": chunks[0], "more_body": False})
        out = b"".join(sent)
        assert b'"previous_response_id":null' not in out
        assert out.count(b'"previous_response_id":"resp_0"') == out.count(b'"previous_response_id"')
        assert out == chunks[0].replace(
            b'"previous_response_id":null', b'"previous_response_id":"resp_0"'
        )
        if content_type == b"application/json":
            assert dict(heads[0]["headers"])[b"content-length"] == str(len(out)).encode()
        stored = await store.get("t", "resp_abc")
        if store_field:
            assert stored is None
        else:
            assert stored is not None and stored.response["previous_response_id"] == "resp_0"
            await store.delete("t", "resp_abc")


async def test_an_answer_echoing_another_id_to_a_request_naming_none_says_null() -> None:
    """A conversation sent whole served from the entry its chained form wrote."""
    state = _state(MemoryResponseStore(max_bytes=1 << 20, max_record_bytes=1 << 16))
    answer = _stream_bytes({**ANSWER, "previous_response_id": "resp_0"})
    sent = await _serve(state, [answer])
    assert b"".join(sent[:-1]) == answer.replace(
        b'"previous_response_id":"resp_0"', b'"previous_response_id":null'
    )


class ThreadNotingState(ResponseState):
    """Notes which thread each conversation was expanded on."""

    threads: list[str]

    def _expanded(self, *args: Any) -> bytes:
        self.threads.append(threading.current_thread().name)
        return super()._expanded(*args)


@pytest.mark.parametrize("num_chars", [100, 300 * 1024])
async def test_a_long_conversation_is_expanded_off_the_event_loop(num_chars: int) -> None:
    store = MemoryResponseStore(max_bytes=1 << 24, max_record_bytes=1 << 22)
    await store.put(_record("resp_0", None, "x" * num_chars, "a0"))
    state = _state(
        store, max_record_bytes=1 << 22, max_history_bytes=1 << 22, kind=ThreadNotingState
    )
    assert isinstance(state, ThreadNotingState)
    state.threads = []
    request = orjson.dumps({"model": "m", "input": "q1", "previous_response_id": "resp_0"})
    raw, _ = await state.open("responses", "t", request)
    said = [item["content"] for item in orjson.loads(raw)["input"]]
    assert said == ["x" * num_chars, "a0", "q1"]
    (thread,) = state.threads
    is_large = num_chars > OFF_LOOP_BYTES
    assert thread.startswith("hasten-parse") == is_large
    assert (thread == threading.current_thread().name) == (not is_large)

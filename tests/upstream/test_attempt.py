"""Unit tests for hasten.upstream.attempt: when one try is ready, and why it failed."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import replace

import pytest

from hasten.apis.chat import CHAT_API
from hasten.errors import HastenError, UpstreamBusy, UpstreamConnectError, UpstreamTimeout
from hasten.routing.gate import InFlightGate
from hasten.upstream.attempt import (
    BUSY_RETRY_AFTER_S,
    AttemptSpec,
    BufferedResponse,
    Failed,
    FirstTokenWatch,
    Ready,
    run_attempt,
)
from hasten.upstream.bridge import NativeOnly
from hasten.upstream.integrity import MAX_EVENT_BYTES
from hasten.wire.sse import SSEDecoder
from tests.support.scripted import Reply, ScriptedTransport, delta, sse, upstream

ROLE_ONLY = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}


def _spec(
    *,
    is_stream: bool,
    deadline_in_s: float = 10.0,
    body: bytes = b"{}",
    gate: InFlightGate | None = None,
) -> AttemptSpec:
    return AttemptSpec(
        upstream("a"),
        NativeOnly("/chat/completions", body, {"content-type": "application/json"}),
        {},
        time.monotonic() + deadline_in_s,
        is_stream,
        CHAT_API,
        gate=gate or InFlightGate(),
    )


async def test_a_stream_is_ready_at_its_first_token_with_what_was_read_so_far() -> None:
    chunks = sse(ROLE_ONLY, delta("hel"), delta("lo"), "[DONE]")
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Ready) and outcome.is_token
    assert outcome.head == list(chunks[:2])  # up to and including the first token
    assert outcome.rest is not None
    assert [chunk async for chunk in outcome.rest] == list(chunks[2:])  # the same stream
    assert not transport.responses[0].is_closed  # handed over open: the winner streams on


async def test_a_stream_that_ends_before_any_token_fails_and_is_closed() -> None:
    transport = ScriptedTransport({"a": [Reply(chunks=sse(ROLE_ONLY))]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Failed) and outcome.reason == "stream_ended"
    assert transport.responses[0].is_closed


async def test_an_error_event_before_the_first_token_fails() -> None:
    chunks = sse({"error": {"message": "overloaded"}})
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Failed) and outcome.reason == "stream_error_event"
    assert outcome.error is not None and "overloaded" in outcome.error.message
    assert not outcome.is_retryable_here


async def test_a_non_stream_answer_is_ready_only_once_read_whole() -> None:
    transport = ScriptedTransport({"a": [Reply(chunks=(b'{"a":', b" 1}"))]})
    outcome = await run_attempt(transport, _spec(is_stream=False))
    assert isinstance(outcome, Ready) and outcome.is_token
    assert isinstance(outcome.response, BufferedResponse)
    assert await outcome.response.read(1.0) == b'{"a": 1}'
    assert transport.responses[0].is_closed


async def test_a_retryable_status_fails_with_its_buffered_answer_and_retry_after() -> None:
    reply = Reply(status=429, chunks=(b'{"error": "slow down"}',), headers={"Retry-After": "2"})
    transport = ScriptedTransport({"a": [reply]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Failed) and outcome.reason == "429"
    assert outcome.is_retryable_here and outcome.retry_after_s == 2.0
    assert outcome.buffered is not None and outcome.buffered.body == b'{"error": "slow down"}'
    assert transport.responses[0].is_closed


async def test_a_final_status_is_ready_without_a_token() -> None:
    transport = ScriptedTransport({"a": [Reply(status=400)]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Ready) and not outcome.is_token
    assert outcome.response.status == 400


@pytest.mark.parametrize(
    ("error", "reason", "is_retryable"),
    [
        (UpstreamConnectError("refused"), "connect_error", True),
        (UpstreamTimeout("no first byte"), "first_byte_timeout", False),
    ],
)
async def test_transport_errors_become_failures(
    error: HastenError, reason: str, is_retryable: bool
) -> None:
    transport = ScriptedTransport({"a": [Reply(error=error)]})
    outcome = await run_attempt(transport, _spec(is_stream=False))
    assert isinstance(outcome, Failed) and outcome.reason == reason
    assert outcome.is_retryable_here is is_retryable


async def test_no_try_once_the_deadline_passed() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    outcome = await run_attempt(transport, _spec(is_stream=False, deadline_in_s=-1.0))
    assert isinstance(outcome, Failed) and outcome.reason == "deadline"
    assert transport.sent == []


async def test_the_upstream_key_replaces_the_clients_and_an_empty_body_is_a_get() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    keyed = replace(upstream("a"), api_key="sk-up")
    request = NativeOnly("/models", b"", {"authorization": "Bearer client"})
    spec = AttemptSpec(keyed, request, {}, time.monotonic() + 10.0, False, CHAT_API)
    await run_attempt(transport, spec)
    sent = transport.sent[0]
    assert sent.method == "GET" and sent.body is None
    assert sent.url == "http://a.test/v1/models"
    assert sent.headers["authorization"] == "Bearer sk-up"


@pytest.mark.parametrize(
    ("event", "has_output"),
    [
        (ROLE_ONLY, False),
        (delta("x"), True),
        ({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, True),
        ({"choices": [{"index": 0, "text": "legacy"}]}, True),
        ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}, True),
        ("[DONE]", True),
    ],
)
def test_first_token_watch(event: Mapping[str, object] | str, has_output: bool) -> None:
    assert FirstTokenWatch(CHAT_API).feed(b"".join(sse(event))) is has_output


def test_first_token_watch_across_chunk_boundaries() -> None:
    frame = sse(delta("split"))[0]
    watch = FirstTokenWatch(CHAT_API)
    assert not watch.feed(frame[:10])
    assert watch.feed(frame[10:])


def _watched(pieces: list[bytes]) -> tuple[int | None, str | None, bool]:
    """Which piece the watch saw the first token in, and what else it noticed."""
    watch = FirstTokenWatch(CHAT_API)
    for index, piece in enumerate(pieces):
        if watch.feed(piece):
            return index, watch.error_message, watch.is_malformed
        if watch.error_message is not None or watch.is_malformed:
            break  # where the attempt gives up (run_attempt)
    return None, watch.error_message, watch.is_malformed


def _decoded_all(pieces: list[bytes]) -> tuple[int | None, str | None, bool]:
    """The same, from every event of every piece decoded before any is looked at."""
    decoder, reference = SSEDecoder(), FirstTokenWatch(CHAT_API)
    for index, piece in enumerate(pieces):
        for payload in decoder.feed(piece):
            if (verdict := reference._verdict(payload)) is not None:
                if verdict:
                    return index, reference.error_message, reference.is_malformed
                return None, reference.error_message, reference.is_malformed
        if reference.error_message is not None:
            break
    return None, reference.error_message, reference.is_malformed


_ERROR = {"error": {"message": "busy"}}
WATCHED_STREAMS = {
    "role_then_token": b"".join(sse(ROLE_ONLY, delta("a"), delta("b"))),
    "comments_first": b": ping\n\n" + b"".join(sse(ROLE_ONLY, delta("a"))),
    "crlf": b"".join(sse(ROLE_ONLY, delta("a"))).replace(b"\n", b"\r\n"),
    "error_then_token": b"".join(sse(_ERROR, delta("a"))),
    "malformed": b"".join(sse(ROLE_ONLY)) + b'data: {"choices": [\n\n' + b"".join(sse(delta("a"))),
    "no_token": b"".join(sse(ROLE_ONLY, ROLE_ONLY)),
    "blank_lines": b"\n\n\n" + b"".join(sse(ROLE_ONLY, "[DONE]")),
}


@pytest.mark.parametrize("name", sorted(WATCHED_STREAMS))
def test_the_first_token_watch_reads_events_lazily_with_the_same_verdict(name: str) -> None:
    stream = WATCHED_STREAMS[name]
    rng = random.Random(name)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 4)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _watched(pieces) == _decoded_all(pieces)


async def test_an_event_that_is_not_json_before_the_first_token_fails() -> None:
    chunks = (*sse(ROLE_ONLY), b'data: {"choices": [\n\n', *sse(delta("late")))
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Failed) and outcome.reason == "malformed"
    assert transport.responses[0].is_closed


async def test_a_whole_json_answer_cut_mid_json_fails_and_may_be_retried() -> None:
    json_type = {"content-type": "application/json"}
    transport = ScriptedTransport({"a": [Reply(chunks=(b'{"choices": [',), headers=json_type)]})
    outcome = await run_attempt(transport, _spec(is_stream=False))
    assert isinstance(outcome, Failed) and outcome.reason == "malformed"
    assert outcome.is_retryable_here


async def test_a_stream_that_holds_too_much_before_its_first_token_fails() -> None:
    # One comment that never ends: nothing to check yet, all of it held.
    piece = b": " + b"x" * (1024 * 1024)
    chunks = (piece,) * (MAX_EVENT_BYTES // len(piece) + 2)
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    outcome = await run_attempt(transport, _spec(is_stream=True))
    assert isinstance(outcome, Failed) and outcome.reason == "malformed"
    assert outcome.error is not None and "before the first token" in outcome.error.message
    assert transport.responses[0].is_closed


# --- the upstream's in-flight gate ------------------------------------------------------


async def test_a_full_upstream_refuses_at_once_as_busy_and_sends_nothing() -> None:
    gate = InFlightGate(1)
    held = gate.try_acquire()
    transport = ScriptedTransport({"a": [Reply(chunks=sse(ROLE_ONLY, delta("hi"), "[DONE]"))]})
    outcome = await run_attempt(transport, _spec(is_stream=True, gate=gate))
    assert isinstance(outcome, Failed) and outcome.reason == "busy"
    assert not outcome.is_retryable_here  # the router moves on; waiting is the client's call
    assert isinstance(outcome.error, UpstreamBusy)
    assert outcome.error.status_code == 429 and outcome.error.error_type == "rate_limit_error"
    assert outcome.error.retry_after_s == outcome.retry_after_s == BUSY_RETRY_AFTER_S
    assert "'a' is busy" in outcome.error.message
    assert transport.sent == [] and gate.num_refused == 1
    assert held is not None
    held.release()
    assert isinstance(await run_attempt(transport, _spec(is_stream=True, gate=gate)), Ready)


async def test_a_ready_stream_holds_its_slot_until_the_response_is_closed() -> None:
    gate = InFlightGate(2)
    transport = ScriptedTransport({"a": [Reply(chunks=sse(ROLE_ONLY, delta("hi"), "[DONE]"))]})
    outcome = await run_attempt(transport, _spec(is_stream=True, gate=gate))
    assert isinstance(outcome, Ready) and gate.num_in_flight == 1
    assert outcome.rest is not None
    assert [chunk async for chunk in outcome.rest]  # read to its end: still held
    assert gate.num_in_flight == 1
    outcome.response.close()
    outcome.response.close()  # closed twice: given back once
    assert gate.num_in_flight == 0 and transport.responses[0].is_closed


@pytest.mark.parametrize(
    ("reply", "is_stream", "reason"),
    [
        (Reply(error=UpstreamConnectError("refused")), False, "connect_error"),
        (Reply(error=UpstreamTimeout("no first byte")), False, "first_byte_timeout"),
        (Reply(status=503, chunks=(b"{}",)), False, "503"),
        (Reply(chunks=sse(ROLE_ONLY)), True, "stream_ended"),
        (Reply(chunks=(b'{"cut": ',)), False, "malformed"),
    ],
)
async def test_every_failure_gives_its_slot_back(
    reply: Reply, is_stream: bool, reason: str
) -> None:
    gate = InFlightGate(1)
    transport = ScriptedTransport({"a": [reply]})
    outcome = await run_attempt(transport, _spec(is_stream=is_stream, gate=gate))
    assert isinstance(outcome, Failed) and outcome.reason == reason
    assert gate.num_in_flight == 0


async def test_a_whole_answer_gives_its_slot_back_once_read() -> None:
    gate = InFlightGate(1)
    transport = ScriptedTransport({"a": [Reply()]})
    outcome = await run_attempt(transport, _spec(is_stream=False, gate=gate))
    # The upstream is done with it: the client still gets the body, the slot is free.
    assert isinstance(outcome, Ready) and outcome.is_token and gate.num_in_flight == 0


@pytest.mark.parametrize("where", ["sending", "awaiting the first token"])
async def test_a_cancelled_attempt_gives_its_slot_back(where: str) -> None:
    # A hedge loser, a client gone, a TTFT timeout: the attempt's task is cancelled.
    gate = InFlightGate(1)
    slow = (
        Reply(head_delay_s=30.0)
        if where == "sending"
        else Reply(chunks=sse(ROLE_ONLY, delta("late")), chunk_delay_s=30.0)
    )
    transport = ScriptedTransport({"a": [slow]})
    task = asyncio.create_task(run_attempt(transport, _spec(is_stream=True, gate=gate)))
    while not transport.sent or (where != "sending" and not transport.responses):
        await asyncio.sleep(0)
    assert gate.num_in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.num_in_flight == 0

"""Every request streamed upstream (hasten.proxy.assemble): a non-stream client's body is
assembled from the upstream's stream, and must be the body the upstream would have sent.

Fidelity runs against real simulators on loopback: one answers hasten (asked as a stream),
an identical twin answers directly (asked as the client asked), so neither's prefix cache
is warmed by the other and both report the same usage.
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.apis.api import Api
from hasten.apis.chat import CHAT_API, body_to_chunks, sse_frames
from hasten.apis.known import MESSAGES_API, RESPONSES_API
from hasten.cache import replay
from hasten.config import CacheConfig
from hasten.errors import UpstreamError
from hasten.proxy.assemble import STREAM_ERROR_CODE, Assembly, assemble
from hasten.simulator import SimConfig, build_app
from hasten.upstream.integrity import StreamGuard
from tests.support.gateway import (
    BodyRecorder,
    OddUpstream,
    make_config,
    running_gateway,
    sim_stats,
)
from tests.support.servers import ServerThread

MEMORY_CACHE = CacheConfig(backend="memory")
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "notify", "parameters": {"type": "object"}}},
]
_MESSAGES = [{"role": "user", "content": "tell me about rivers"}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("chat/completions", {"messages": _MESSAGES}),
    "chat_n3": ("chat/completions", {"messages": _MESSAGES, "n": 3}),
    "chat_tools_n3": ("chat/completions", {"messages": _MESSAGES, "tools": TOOLS, "n": 3}),
    "chat_named_tool": (
        "chat/completions",
        {
            "messages": _MESSAGES,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "notify"}},
        },
    ),
    "chat_logprobs_n3": (
        "chat/completions",
        {"messages": _MESSAGES, "logprobs": True, "top_logprobs": 3, "n": 3},
    ),
    "chat_max_tokens_stop": (
        "chat/completions",
        {"messages": _MESSAGES, "max_tokens": 5, "stop": ["zzz"]},
    ),
    "completions_logprobs_n3": (
        "completions",
        {"prompt": "once upon a time", "logprobs": 2, "n": 3},
    ),
    "completions": ("completions", {"prompt": ["a list", "of prompts"]}),
}
ID_FORMATS = {"chat/completions": r"chatcmpl-\w+", "completions": r"cmpl-\w+"}


@pytest.fixture(scope="module")
def twins() -> Iterator[tuple[ServerThread, ServerThread]]:
    config = SimConfig(output_tokens=12)
    with ServerThread(build_app(config)) as behind, ServerThread(build_app(config)) as direct:
        yield behind, direct


@pytest.fixture(scope="module")
def gateway(twins: tuple[ServerThread, ServerThread]) -> Iterator[ServerThread]:
    config = make_config({"sim": twins[0].url + "/v1"}, cache=MEMORY_CACHE)
    with running_gateway(config) as server:
        yield server


class FirstCallsFail:
    """Sends the first ``num_calls`` requests to the simulator with fault headers (the
    gateway forwards no ``x-sim-*`` header), then lets the rest through untouched."""

    def __init__(self, app: Any, headers: dict[str, str], num_calls: int = 1) -> None:
        self.app, self.num_left = app, num_calls
        self.headers = [(k.encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        is_completion = scope["type"] == "http" and scope["path"].endswith("/completions")
        if is_completion and self.num_left > 0:
            self.num_left -= 1
            scope = {**scope, "headers": [*scope["headers"], *self.headers]}
        await self.app(scope, receive, send)


def _request(case: str) -> tuple[str, dict[str, Any]]:
    path, fields = CASES[case]
    body = {"model": "sim-model", "temperature": 0, "seed": 7, **fields}
    if "messages" in body:
        body["messages"] = [{"role": "user", "content": f"tell me about {case}"}]
    return path, body


@pytest.mark.parametrize("case", sorted(CASES))
def test_assembled_body_is_the_upstreams_own_non_stream_body(
    case: str, twins: tuple[ServerThread, ServerThread], gateway: ServerThread
) -> None:
    path, body = _request(case)
    got = _assert_assembled_faithfully(twins, gateway, path, body, {}, "miss")
    # The stored stream answers the next non-stream client from the cache, unchanged.
    hit = httpx.post(f"{gateway.url}/v1/{path}", json=body, timeout=30)
    assert hit.headers["x-hasten-cache"] == "hit" and hit.content == got.content


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bypassed_request_gets_the_upstreams_own_non_stream_body_too(
    case: str, twins: tuple[ServerThread, ServerThread], gateway: ServerThread
) -> None:
    path, body = _request(case)
    body["messages" if "messages" in body else "prompt"] = (
        [{"role": "user", "content": f"bypass {case}"}] if "messages" in body else f"bypass {case}"
    )
    uncached = {"cache-control": "no-cache, no-store"}  # the path a non-cacheable request takes
    _assert_assembled_faithfully(twins, gateway, path, body, uncached, "bypass")


def _assert_assembled_faithfully(
    twins: tuple[ServerThread, ServerThread],
    gateway: ServerThread,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    label: str,
) -> httpx.Response:
    behind, direct = twins
    streams_before = sim_stats(behind.url)["num_stream_requests"]
    expected = httpx.post(f"{direct.url}/v1/{path}", json=body, timeout=30)
    got = httpx.post(f"{gateway.url}/v1/{path}", json=body, headers=headers, timeout=30)
    assert expected.status_code == got.status_code == 200, got.text
    assert got.headers["x-hasten-cache"] == label
    assert got.headers["content-type"] == "application/json"
    assert int(got.headers["content-length"]) == len(got.content)
    assert sim_stats(behind.url)["num_stream_requests"] == streams_before + 1
    want, have = expected.json(), got.json()
    # What differs by nature: the id (a fresh one per answer) and the clock.
    assert re.fullmatch(ID_FORMATS[path], have["id"])
    assert isinstance(have["created"], int) and abs(have["created"] - want["created"]) < 60
    for name in ("object", "model", "system_fingerprint", "usage"):
        assert have[name] == want[name], name
    assert len(have["choices"]) == len(want["choices"]) == body.get("n", 1)
    for mine, theirs in zip(have["choices"], want["choices"], strict=True):
        assert mine == theirs
    # Byte-compatible: with id and created set to the upstream's, the very same bytes.
    assert orjson.dumps({**have, "id": want["id"], "created": want["created"]}) == (
        expected.content
    )
    return got


def test_the_fields_compared_are_really_there(twins: tuple[ServerThread, ServerThread]) -> None:
    """Guards the fidelity test: the simulator does answer with every field it compares."""
    direct = twins[1]
    path, body = _request("chat_tools_n3")
    tools = httpx.post(f"{direct.url}/v1/{path}", json=body).json()
    calls = [choice["message"]["tool_calls"] for choice in tools["choices"]]
    assert all(len(c) == 2 and c[0]["id"].startswith("call_") for c in calls)
    assert orjson.loads(calls[0][1]["function"]["arguments"])["text"]
    assert {choice["finish_reason"] for choice in tools["choices"]} == {"tool_calls"}
    assert tools["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    path, body = _request("chat_logprobs_n3")
    logprobs = httpx.post(f"{direct.url}/v1/{path}", json=body).json()["choices"][2]["logprobs"]
    assert len(logprobs["content"]) == 12 and len(logprobs["content"][0]["top_logprobs"]) == 3
    path, body = _request("completions_logprobs_n3")
    legacy = httpx.post(f"{direct.url}/v1/{path}", json=body).json()["choices"][0]["logprobs"]
    assert len(legacy["tokens"]) == len(legacy["text_offset"]) == 12


async def test_a_stream_and_a_non_stream_client_share_one_upstream_call() -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=400, output_tokens=8))) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE)
        with running_gateway(config) as gateway:
            body = {"model": "sim-model", "messages": _MESSAGES, "temperature": 0}
            url = f"{gateway.url}/v1/chat/completions"
            async with httpx.AsyncClient(timeout=30) as client:
                streamed, whole = await asyncio.gather(
                    client.post(url, json={**body, "stream": True}),
                    client.post(url, json=body),
                )
            stats = sim_stats(sim.url)
    assert stats["num_requests"] == 1 and stats["num_stream_requests"] == 1
    events = [line[6:] for line in streamed.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert not any('"usage":{' in event for event in events)  # it did not ask for usage
    pieces = [
        choice["delta"].get("content") or ""
        for event in events[:-1]
        for choice in orjson.loads(event)["choices"]
    ]
    assert whole.json()["choices"][0]["message"]["content"] == "".join(pieces)
    assert whole.json()["usage"]["completion_tokens"] == 8


def test_stream_upstream_false_forwards_the_request_as_the_client_sent_it() -> None:
    recorder = BodyRecorder(build_app(SimConfig()))
    with ServerThread(recorder) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE, is_stream_upstream=False)
        raw = (
            b'{"model": "sim-model", "temperature": 0,\n'
            b' "messages": [{"role": "user", "content": "x"}]}'
        )
        with running_gateway(config) as gateway:
            response = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                content=raw,
                headers={"content-type": "application/json"},
            )
        assert sim_stats(sim.url)["num_stream_requests"] == 0
    assert response.status_code == 200
    assert recorder.bodies == [raw]  # byte for byte, no stream added
    assert response.json()["object"] == "chat.completion"


def test_a_stream_cut_midway_is_one_clean_error_and_nothing_is_cached() -> None:
    cut = {"x-sim-fail": "disconnect", "x-sim-fail-after-chunks": "5"}
    with ServerThread(FirstCallsFail(build_app(SimConfig(output_tokens=40)), cut)) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE)
        body = {"model": "sim-model", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            failed = httpx.post(url, json=body, timeout=30)
            # The failure was not cached: the next request goes upstream and succeeds.
            again = httpx.post(url, json=body, timeout=30)
            num_requests = sim_stats(sim.url)["num_requests"]
    assert failed.status_code == 502
    assert set(failed.json()["error"]) == {"message", "type", "param", "code"}
    assert again.status_code == 200 and again.headers["x-hasten-cache"] == "miss"
    assert again.json()["usage"]["completion_tokens"] == 40
    assert num_requests == 2


def test_an_error_event_midway_is_a_502_with_the_upstreams_error() -> None:
    fail = {"x-sim-fail": "500", "x-sim-fail-after-chunks": "5"}
    with ServerThread(FirstCallsFail(build_app(SimConfig(output_tokens=40)), fail)) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE)
        body = {"model": "sim-model", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            failed = httpx.post(url, json=body, timeout=30)
    assert failed.status_code == 502
    error = failed.json()["error"]
    assert "The server had an error" in error["message"]  # the simulator's own words
    assert error["type"] == "upstream_error"


def test_an_upstream_error_status_passes_through_unchanged() -> None:
    with ServerThread(build_app(SimConfig(strict_models=True, models=("sim-model",)))) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE)
        body = {"model": "no-such-model", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            got = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
        direct = httpx.post(f"{sim.url}/v1/chat/completions", json=body)
    assert got.status_code == direct.status_code == 404
    assert got.content == direct.content


# --- the pure parts ---------------------------------------------------------------------

ANSWER = {
    "id": "chatcmpl-9",
    "object": "chat.completion",
    "created": 5,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi there", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
}


def _stream(answer: dict[str, Any]) -> bytes:
    return b"".join(sse_frames(body_to_chunks(orjson.dumps(answer), "chat"), True))


def test_assemble_merges_a_whole_stream_split_anywhere() -> None:
    stream = _stream(ANSWER)
    assert orjson.loads(assemble(stream, CHAT_API)) == ANSWER
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    assert assemble(pieces, CHAT_API) == assemble(stream, CHAT_API)


@pytest.mark.parametrize(
    "stream",
    [
        b"",
        b'data: {"id":"x","choices":[]}\n\n',  # no [DONE]
        b'data: {"id":"x","choices":[]}\n\ndata: [DO',  # cut inside an event
        b"data: [1, 2]\n\ndata: [DONE]\n\n",  # not the OpenAI shape
    ],
)
def test_assemble_refuses_an_unfinished_or_foreign_stream(stream: bytes) -> None:
    with pytest.raises(UpstreamError) as caught:
        assemble(stream, CHAT_API)
    assert caught.value.status_code == 502 and caught.value.code == STREAM_ERROR_CODE


def test_assemble_raises_the_upstreams_error_event() -> None:
    event = {"error": {"message": "overloaded", "type": "server_error", "code": "busy"}}
    stream = _stream(ANSWER).replace(b"data: [DONE]", b"data: " + orjson.dumps(event))
    with pytest.raises(UpstreamError) as caught:
        assemble(stream + b"data: [DONE]\n\n", CHAT_API)
    assert "overloaded" in caught.value.message and caught.value.code == "busy"


def _as_stream(body: dict[str, Any]) -> dict[str, Any]:
    return CHAT_API.as_stream(body, with_usage=True)


def test_as_stream_request_asks_for_usage_and_keeps_other_stream_options() -> None:
    assert _as_stream({"stream": False}) == {
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    kept = _as_stream({"stream_options": {"include_obfuscation": False}})
    assert kept["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def _guarded(pieces: list[bytes]) -> bytes:
    """What ``Assembly`` builds from a stream's pieces, fed through the guard as a call does."""
    assembly = Assembly(CHAT_API)
    guard = StreamGuard(assembly)
    for piece in pieces:
        guard.feed(piece)
    guard.finish()
    return assembly.body()


def _outcome(build: Callable[[], bytes]) -> tuple[str, bytes | str | None]:
    try:
        return "body", build()
    except UpstreamError as exc:
        return "error", f"{exc.status_code} {exc.code} {exc.message}"


_TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_ERROR_EVENT = b'data: {"error":{"message":"overloaded","code":"busy"}}\n\n'
_SIM_STREAM = _stream(
    {
        **ANSWER,
        "system_fingerprint": "fp",
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": None if i == 1 else f"answer {i}",
                    "refusal": None,
                    **({"tool_calls": [_TOOL_CALL]} if i == 1 else {}),
                },
                "logprobs": {"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]},
                "finish_reason": "tool_calls" if i == 1 else "stop",
            }
            for i in range(3)
        ],
    }
)
# Whole, and every way the guard lets one through that ``assemble`` still refuses or reads
# differently: CR line ends, comments, multi-line data, a misplaced or doubled [DONE], an
# error event, a last event without its blank line, a foreign shape.
ASSEMBLY_STREAMS = {
    "whole": _SIM_STREAM,
    "crlf": _SIM_STREAM.replace(b"\n", b"\r\n"),
    "cr": _SIM_STREAM.replace(b"\n", b"\r"),
    "comments": b": keep-alive\n\n" + _SIM_STREAM.replace(b"\n\n", b"\n\n: ping\n\n", 3),
    "multi_line_data": _SIM_STREAM.replace(b'"object":', b'\ndata: "object":', 2),
    "event_names": _SIM_STREAM.replace(b"data: {", b"event: chunk\ndata: {", 2),
    "no_done": _SIM_STREAM.replace(b"data: [DONE]\n\n", b""),
    "done_twice": _SIM_STREAM + b"data: [DONE]\n\n",
    "done_midway": _SIM_STREAM.replace(b"\n\n", b"\n\ndata: [DONE]\n\n", 1),
    "error_event": _SIM_STREAM.replace(b"data: [DONE]", _ERROR_EVENT + b"data: [DONE]"),
    "error_then_cut": _SIM_STREAM.replace(b"data: [DONE]\n\n", _ERROR_EVENT),
    "done_without_blank_line": _SIM_STREAM[:-1],
    "trailing_blank_lines": _SIM_STREAM + b"\n\n\n",
    "foreign_shape": b"data: [1, 2]\n\ndata: [DONE]\n\n",
    "choices_not_a_list": b'data: {"id":"x","choices":7}\n\ndata: [DONE]\n\n',
    "content_not_a_string": _SIM_STREAM.replace(b'"content":"answer 0"', b'"content":5', 1),
    "indexes_that_do_not_sort": _SIM_STREAM.replace(b'"index":2', b'"index":"2"', 1),
    "only_done": b"data: [DONE]\n\n",
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(ASSEMBLY_STREAMS))
def test_assembly_from_the_guards_events_is_assemble_of_the_bytes(name: str) -> None:
    stream = ASSEMBLY_STREAMS[name]
    expected = _outcome(lambda: assemble(stream, CHAT_API))
    rng = random.Random(name)
    for _ in range(25):  # split anywhere, as the network may
        num_cuts = min(max(len(stream) - 1, 0), rng.randint(0, 6))
        cuts = sorted(rng.sample(range(1, len(stream)), num_cuts))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _outcome(functools.partial(_guarded, pieces)) == expected
    assert name not in ("whole", "crlf", "comments") or expected[0] == "body"
    assert name not in ("content_not_a_string", "indexes_that_do_not_sort") or expected == (
        "error",
        f"502 {STREAM_ERROR_CODE} upstream stream is not an OpenAI completion stream",
    )


def test_a_streamed_answer_is_merged_once_for_every_later_non_stream_hit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    merges: list[int] = []
    merge = replay.answer_body

    def counted(entry: Any, api: Any) -> bytes:
        if entry.body is None:  # a merge of the stored chunks, not the body kept after one
            merges.append(1)
        return merge(entry, api)

    monkeypatch.setattr(replay, "answer_body", counted)
    with ServerThread(build_app(SimConfig(output_tokens=30))) as sim:
        config = make_config({"sim": sim.url + "/v1"}, cache=MEMORY_CACHE)
        body = {"model": "sim-model", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            miss = httpx.post(url, json=body, timeout=30)
            hits = [httpx.post(url, json=body, timeout=30) for _ in range(3)]
            streamed = httpx.post(url, json={**body, "stream": True}, timeout=30)
        assert sim_stats(sim.url)["num_requests"] == 1
    assert miss.headers["x-hasten-cache"] == "miss"
    assert [h.headers["x-hasten-cache"] for h in hits] == ["hit"] * 3
    # The first hit merged the stored stream; the next two were served what it kept.
    assert len(merges) == 1
    assert hits[0].content == hits[1].content == hits[2].content
    assert hits[0].json()["choices"] == miss.json()["choices"]
    assert hits[0].json()["usage"] == miss.json()["usage"]
    # A stream client still gets the stored chunks.
    events = [line[6:] for line in streamed.text.split("\n") if line.startswith("data: ")]
    pieces = [
        choice["delta"].get("content") or ""
        for event in events[:-1]
        for choice in orjson.loads(event)["choices"]
    ]
    assert "".join(pieces) == miss.json()["choices"][0]["message"]["content"]


def _stats(gateway: ServerThread) -> dict[str, int]:
    return httpx.get(f"{gateway.url}/stats").json()["requests"]  # type: ignore[no-any-return]


def test_a_stream_that_merges_into_no_body_is_a_502_and_is_not_stored() -> None:
    upstream = OddUpstream()
    with ServerThread(upstream) as server:
        config = make_config({"odd": server.url + "/v1"}, cache=MEMORY_CACHE)
        body = {"model": "m", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            answers = [httpx.post(url, json=body, timeout=30) for _ in range(2)]
            stats = _stats(gateway)
    for answer in answers:
        assert answer.status_code == 502, answer.text
        error = answer.json()["error"]
        assert error["code"] == STREAM_ERROR_CODE and error["type"] == "upstream_error"
    assert upstream.num_calls == 2  # the first answer was not stored
    assert stats.get("unservable_entries", 0) == 0


@pytest.mark.parametrize("is_stream_upstream", [True, False])
def test_a_stored_answer_with_no_form_for_the_next_client_is_dropped_not_served(
    is_stream_upstream: bool,
) -> None:
    # Streamed upstream, a stream client stores a stream a non-stream client cannot be
    # given; asked whole, a non-stream client stores a body no stream can be made of.
    upstream = OddUpstream()
    with ServerThread(upstream) as server:
        config = make_config(
            {"odd": server.url + "/v1"},
            cache=MEMORY_CACHE,
            is_stream_upstream=is_stream_upstream,
        )
        body = {"model": "m", "messages": _MESSAGES, "temperature": 0}
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            first = httpx.post(url, json={**body, "stream": is_stream_upstream}, timeout=30)
            stored = httpx.post(url, json={**body, "stream": is_stream_upstream}, timeout=30)
            other = httpx.post(url, json={**body, "stream": not is_stream_upstream}, timeout=30)
            stats = _stats(gateway)
    assert first.status_code == 200 and first.headers["x-hasten-cache"] == "miss"
    assert stored.status_code == 200 and stored.headers["x-hasten-cache"] == "hit"
    # The other kind of client is not served the entry: it is dropped, and the request
    # goes upstream, whose answer (the same odd one) that client gets as it can: a
    # non-stream client the assembly's 502, a stream client the stream as it came.
    if is_stream_upstream:
        assert other.status_code == 502, other.text
        assert other.json()["error"]["code"] == STREAM_ERROR_CODE
    else:
        assert other.status_code == 200 and other.headers["x-hasten-cache"] == "miss"
        assert '"content":5' in other.text
    assert upstream.num_calls == 2
    assert stats["unservable_entries"] == 1
    assert stats["hit"] == 1


_EVENTS: list[Any] = [
    {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"error": {"message": "overloaded", "code": "busy"}},
    {"error": "plain"},
    {"error": None},
    {"type": "response.output_text.delta", "delta": "a"},
    {"type": "response.completed", "response": {}},
    {"type": "response.failed", "response": {"error": {"message": "no"}}},
    {"type": "response.failed"},
    {"type": "error", "message": "bad", "code": "x"},
    {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
    {"type": "message_stop"},
    [1, 2],
    "text",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([CHAT_API, RESPONSES_API, MESSAGES_API]),
    st.lists(st.sampled_from(_EVENTS), max_size=4),
    st.sampled_from(_EVENTS),
    st.booleans(),
)
def test_every_event_an_api_reports_as_an_error_breaks_its_ending(
    api: Api, before: list[Any], event: Any, is_done_before: bool
) -> None:
    # Assembly asks for an event's error only once the ending is broken: that finds the
    # first error event only if each one breaks the ending, whatever came before it.
    ending = api.ending()
    for earlier in before:
        ending.event(earlier)
    if is_done_before:
        ending.done()
    ending.event(event)
    assert api.event_error(event) is None or ending.is_broken

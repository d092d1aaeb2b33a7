"""A native upstream's answer reaches the client byte for byte: the bytes a client gets
through hasten, stream and not, on the Responses and Messages APIs, are the bytes the
upstream sent (recorded in front of the simulator's native endpoints), with the upstream's
request ids and rate limit headers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from hasten.simulator import SimConfig, build_app
from tests.clients.stack import gateway_on
from tests.support.gateway import read_request
from tests.support.servers import ServerThread

# What OpenAI and Anthropic send beside an answer, and a client or its SDK reads.
UPSTREAM_HEADERS = {
    "/v1/responses": {
        "x-request-id": "req_7f3a",
        "openai-processing-ms": "412",
        "x-ratelimit-remaining-tokens": "149000",
    },
    "/v1/messages": {
        "request-id": "req_011CV",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-unified-status": "allowed",
    },
}


@dataclass
class Recorder:
    """ASGI middleware in front of an upstream: adds a provider's headers to its answers
    and keeps, per path, the bytes of the last answer's body."""

    app: Any
    bodies: dict[str, bytes] = field(default_factory=dict)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, sent = scope["path"], bytearray()
        request = await read_request(receive)
        is_replayed = False

        async def replay() -> Any:
            nonlocal is_replayed
            if is_replayed:
                return await receive()
            is_replayed = True
            return {"type": "http.request", "body": request, "more_body": False}

        async def record(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = UPSTREAM_HEADERS.get(path, {})
                message = {
                    **message,
                    "headers": [
                        *message["headers"],
                        *((k.encode(), v.encode()) for k, v in extra.items()),
                    ],
                }
            elif message["type"] == "http.response.body":
                sent.extend(message.get("body", b""))
                if not message.get("more_body"):
                    self.bodies[path] = bytes(sent)
            await send(message)

        await self.app(scope, replay, record)


REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/responses": {
        "model": "sim-model",
        "instructions": "be brief",
        "input": [{"role": "user", "content": "pass me through"}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": "none",
        "metadata": {"run": "1"},
    },
    "/v1/messages": {
        "model": "sim-model",
        "max_tokens": 32,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "pass me through"}],
        "metadata": {"user_id": "session-1"},
    },
}
ANTHROPIC = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
OPENAI = {"authorization": "Bearer sk-test"}
# No simulated provider prefix cache: two calls of one request report the same usage.
SIM = SimConfig(ttft_base_ms=0, decode_ms_per_token=0, prefix_cache_blocks=0)


@dataclass
class Stack:
    upstream: ServerThread
    recording: Recorder
    gateway: ServerThread  # stream_upstream = true (the default)
    whole_gateway: ServerThread  # stream_upstream = false


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    recording = Recorder(build_app(SIM))
    with (
        ServerThread(recording) as upstream,
        gateway_on(upstream.url, "native") as gateway,
        gateway_on(upstream.url, "native", is_stream_upstream=False) as whole_gateway,
    ):
        yield Stack(upstream, recording, gateway, whole_gateway)


def _send(base_url: str, path: str, *, is_stream: bool) -> httpx.Response:
    """The request at ``path`` (a miss: its temperature is not cached), its body read raw."""
    body = {**REQUESTS[path], "stream": is_stream, "temperature": 0.7}
    headers = ANTHROPIC if path == "/v1/messages" else OPENAI
    with httpx.Client(base_url=base_url, timeout=30) as client:
        with client.stream("POST", path, json=body, headers=headers) as answer:
            answer._content = b"".join(answer.iter_raw())
    assert answer.status_code == 200, answer.content
    return answer


def _check_headers(answer: httpx.Response, path: str, content_type: str) -> None:
    assert answer.headers["x-hasten-cache"] != "hit"
    for name, value in UPSTREAM_HEADERS[path].items():
        assert answer.headers[name] == value
    assert answer.headers["content-type"].startswith(content_type)


@pytest.mark.parametrize("path", list(REQUESTS))
def test_a_stream_reaches_the_client_byte_for_byte(stack: Stack, path: str) -> None:
    answer = _send(stack.gateway.url, path, is_stream=True)
    assert answer.content == stack.recording.bodies[path] and answer.content
    _check_headers(answer, path, "text/event-stream")


@pytest.mark.parametrize("path", list(REQUESTS))
def test_a_whole_answer_reaches_the_client_byte_for_byte_without_stream_upstream(
    stack: Stack, path: str
) -> None:
    answer = _send(stack.whole_gateway.url, path, is_stream=False)
    assert answer.content == stack.recording.bodies[path] and answer.content
    _check_headers(answer, path, "application/json")


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "id"}
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


@pytest.mark.parametrize("path", list(REQUESTS))
def test_a_whole_answer_assembled_from_the_upstream_stream_is_the_direct_answer(
    stack: Stack, path: str
) -> None:
    """By default a whole answer is asked of the upstream as a stream and assembled: the
    same bytes a direct call gets, but for the ids the upstream mints per call."""
    direct = _send(stack.upstream.url, path, is_stream=False)
    answer = _send(stack.gateway.url, path, is_stream=False)
    assert stack.recording.bodies[path].startswith(b"event: ")  # streamed upstream
    assert _without_ids(orjson.loads(answer.content)) == _without_ids(orjson.loads(direct.content))
    ids = re.compile(rb'"id":"[^"]*"')
    assert ids.sub(b"", answer.content) == ids.sub(b"", direct.content)  # the same layout too
    _check_headers(answer, path, "application/json")

"""Builders for gateway integration tests: configs, a running gateway, scripted upstreams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import orjson

from hasten.apis.chat import body_to_chunks, sse_frames
from hasten.app import HastenApp
from hasten.config import (
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    ServerConfig,
    TenantKey,
    TimeoutConfig,
    UpstreamConfig,
)
from hasten.server.connection import protocol_for
from tests.support.servers import ServerThread

FAST_RETRY = RetryConfig(max_retries=2, backoff_base_s=0.01, backoff_max_s=0.05)


def make_config(
    upstreams: dict[str, str],
    *,
    fallbacks: Sequence[str] = (),
    cache: CacheConfig | None = None,
    api_keys: Sequence[tuple[str, str]] = (),
    admin_api_key: str | None = None,
    timeouts: TimeoutConfig | None = None,
    retry: RetryConfig = FAST_RETRY,
    max_body_bytes: int | None = None,
    models: Sequence[str] = ("*",),
    aliases: dict[str, str] | None = None,
    is_stream_upstream: bool = True,
    apis: tuple[str, ...] = (),
) -> GatewayConfig:
    """A config whose first upstream serves ``models``, falling back to ``fallbacks``."""
    ups = {
        name: UpstreamConfig(
            name=name,
            url=url,
            timeouts=timeouts or TimeoutConfig(),
            retry=retry,
            is_stream_upstream=is_stream_upstream,
            apis=apis,
        )
        for name, url in upstreams.items()
    }
    primary = next(iter(upstreams))
    routes = {m: ModelRoute(name=m, upstream=primary, fallbacks=tuple(fallbacks)) for m in models}
    server = ServerConfig(
        api_keys=tuple(TenantKey(tenant=t, key=k) for t, k in api_keys),
        admin_api_key=admin_api_key,
    )
    if max_body_bytes is not None:
        server = replace(server, max_body_bytes=max_body_bytes)
    return GatewayConfig(
        server=server,
        upstreams=ups,
        models=routes,
        aliases=aliases or {},
        cache=cache or CacheConfig(backend="memory"),
    )


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[ServerThread]:
    # With the gateway's own connection protocol (limits, timeouts), as `hasten serve` runs it.
    with ServerThread(HastenApp(config), lifespan="on", http=protocol_for(config.server)) as server:
        yield server


def sim_stats(sim_url: str) -> dict[str, Any]:
    return httpx.get(f"{sim_url}/sim/stats").json()  # type: ignore[no-any-return]


def chat_body(content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        **extra,
    }


@dataclass
class ScriptedUpstream:
    """An OpenAI-ish upstream answering from a script: one (status, headers, body) per call."""

    script: list[tuple[int, dict[str, str], dict[str, Any]]]
    calls: list[float] = field(default_factory=list)
    clock: Callable[[], float] = field(default=lambda: asyncio.get_running_loop().time())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await read_request(receive)
        self.calls.append(self.clock())
        index = min(len(self.calls) - 1, len(self.script) - 1)
        status, headers, body = self.script[index]
        raw_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
        await send_answer(send, status, raw_headers, body, is_stream=_asks_stream(request))


async def read_request(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


def _asks_stream(request: bytes) -> bool:
    try:
        parsed = orjson.loads(request)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


async def send_answer(
    send: Any,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: dict[str, Any],
    *,
    is_stream: bool,
) -> None:
    """``body`` as JSON or, to a stream request and with status 200, as OpenAI streams it
    (with its usage chunk): scripted upstreams answer both ways, as OpenAI does."""
    if is_stream and status == 200:
        chunks = body_to_chunks(orjson.dumps(body), "chat")
        payload = b"".join(sse_frames(chunks, include_usage=True))
        content_type = b"text/event-stream"
    else:
        payload, content_type = orjson.dumps(body), b"application/json"
    raw_headers = [(b"content-type", content_type), *headers]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


class OddUpstream:
    """Answers every request the same way: a stream whose text is a number (its events are
    JSON, so a stream client gets it as sent, but it merges into no body), or, asked
    whole, a body whose choices are no list (it splits into no stream)."""

    def __init__(self) -> None:
        self.num_calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = orjson.loads(await read_request(receive))
        self.num_calls += 1
        head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        if request.get("stream"):
            events = [
                {**head, "choices": [{"index": 0, "delta": {"content": 5}}]},
                {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
            body, content_type = body + b"data: [DONE]\n\n", b"text/event-stream"
        else:
            body = orjson.dumps({**head, "object": "chat.completion", "choices": 7})
            content_type = b"application/json"
        headers = [(b"content-type", content_type)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "sim-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class BodyRecorder:
    """ASGI middleware in front of the simulator: keeps every request body it got on a path
    ending with ``suffix`` (chat's, unless told)."""

    def __init__(self, app: Any, suffix: str = "/chat/completions") -> None:
        self.app = app
        self.suffix = suffix
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        if scope["path"].endswith(self.suffix):
            self.bodies.append(body)
        is_replayed = False

        async def replay() -> Any:
            nonlocal is_replayed
            if is_replayed:
                return await receive()  # the simulator watches for a disconnect
            is_replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

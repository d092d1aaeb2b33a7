"""The request path resolves a model once: that one ``ResolvedModel`` keys the cache and
routes the upstream call (hasten.proxy.handle), with the app driven in-process over ASGI."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import orjson

from hasten.apis.chat import body_to_chunks, sse_frames
from hasten.app import HastenApp
from hasten.config import CacheConfig, GatewayConfig, ModelRoute
from hasten.config.hybrid import HybridConfig
from hasten.local.gateway import with_hybrid_routes
from hasten.routing.models import ModelRouter, ResolvedModel
from hasten.wire.asgi import Message
from tests.support.scripted import Reply, ScriptedTransport, delta, sse, upstream

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
# A non-stream request is asked upstream as a stream (hasten.proxy.assemble).
ANSWER_STREAM = tuple(sse_frames(body_to_chunks(orjson.dumps(ANSWER), "chat"), True))


class CountingRouter(ModelRouter):
    def __init__(self, config: GatewayConfig) -> None:
        super().__init__(config)
        self.resolved: list[str] = []

    def resolve(self, requested: str) -> ResolvedModel:
        self.resolved.append(requested)
        return super().resolve(requested)


def _config(**models: ModelRoute) -> GatewayConfig:
    return GatewayConfig(
        upstreams={"a": upstream("a")},
        models=models or {"gpt": ModelRoute(name="gpt", upstream="a")},
        aliases={"fast": "gpt"},
        cache=CacheConfig(backend="memory"),
    )


class InProcess:
    """A gateway app with a counting router, driven over ASGI without a server."""

    def __init__(self, config: GatewayConfig, transport: ScriptedTransport) -> None:
        self.app = HastenApp(config, transport=transport)
        self.router = CountingRouter(config)
        self.num_receives = 0  # of the last request

    async def __aenter__(self) -> InProcess:
        gateway = await self.app.startup()
        gateway.pipeline.router = self.router
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.app.shutdown()

    async def post(
        self, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        sent = await self.exchange(body, headers=headers)
        answer = b"".join(m.get("body", b"") for m in sent[1:])
        return sent[0]["status"], dict(sent[0]["headers"]), answer

    async def exchange(
        self,
        body: dict[str, Any],
        *,
        is_leaving: bool = False,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> list[Message]:
        """The messages sent for ``body``; with ``is_leaving`` the client disconnects as soon
        as the answer starts, otherwise it stays until the answer is done."""
        messages: list[Message] = [
            {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
        ]
        gone = asyncio.Event()
        self.num_receives = 0

        async def receive() -> Message:
            self.num_receives += 1
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)
            if is_leaving:
                gone.set()

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": [(b"content-type", b"application/json"), *headers],
            "query_string": b"",
        }
        await asyncio.wait_for(self.app(scope, receive, send), timeout=30)
        return sent


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_a_miss_resolves_its_model_once_for_the_cache_and_the_upstream() -> None:
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(_config(), transport) as gateway:
        status, headers, _ = await gateway.post(_chat("fast", temperature=0))
        assert status == 200
        assert headers[b"x-hasten-cache"] == b"miss"
        assert headers[b"x-hasten-upstream"] == b"a"
        assert gateway.router.resolved == ["fast"]
        sent = transport.sent[0].body
        assert sent is not None and orjson.loads(sent)["model"] == "gpt"  # the alias's route
        status, headers, _ = await gateway.post(_chat("gpt", temperature=0))
        assert headers[b"x-hasten-cache"] == b"hit"  # "fast" and "gpt" share one entry
        assert gateway.router.resolved == ["fast", "gpt"]
        assert len(transport.sent) == 1


async def test_only_an_answer_that_can_wait_listens_for_the_client_going_away() -> None:
    # Listening for a disconnect takes a task per request; an L1 hit never waits, so it never
    # asks for more than the body. Everything that can wait (here the upstream) listens.
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(_config(), transport) as gateway:
        _, headers, _ = await gateway.post(_chat("gpt", temperature=0))
        assert headers[b"x-hasten-cache"] == b"miss" and gateway.num_receives == 2
        for stream in (False, True):
            _, headers, _ = await gateway.post(_chat("gpt", temperature=0, stream=stream))
            assert headers[b"x-hasten-cache"] == b"hit" and gateway.num_receives == 1


async def test_a_paced_replay_stops_when_the_client_goes_away() -> None:
    cache = CacheConfig(backend="memory", replay="paced", replay_chunk_interval_ms=50.0)
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(replace(_config(), cache=cache), transport) as gateway:
        _, _, whole = await gateway.post(_chat("gpt", temperature=0, stream=True))
        sent = await gateway.exchange(_chat("gpt", temperature=0, stream=True), is_leaving=True)
        assert dict(sent[0]["headers"])[b"x-hasten-cache"] == b"hit"
        replayed = b"".join(m.get("body", b"") for m in sent[1:])
        assert whole.startswith(replayed) and len(replayed) < len(whole)
        assert all(m.get("more_body", False) for m in sent[1:])  # never ended as complete


async def test_a_streamed_bypass_resolves_its_model_once() -> None:
    chunks = sse(delta("hi"), "[DONE]")
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    async with InProcess(_config(), transport) as gateway:
        status, headers, body = await gateway.post(_chat("gpt", stream=True, temperature=1))
        assert status == 200 and body == b"".join(chunks)
        assert headers[b"x-hasten-cache"] == b"bypass"
        assert gateway.router.resolved == ["gpt"]


async def test_a_hybrid_request_resolves_only_the_route_it_was_given() -> None:
    hybrid = HybridConfig(model="auto", policy="cloud-only", cloud_model="gpt")
    config = with_hybrid_routes(replace(_config(), hybrid=hybrid))
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(config, transport) as gateway:
        status, headers, _ = await gateway.post(_chat("auto"))
        assert status == 200 and headers[b"x-hasten-hybrid"].startswith(b"cloud")
        assert gateway.router.resolved == ["auto@cloud"]


async def test_a_repeated_body_is_resolved_once_and_keyed_the_same() -> None:
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(_config(), transport) as gateway:
        _, miss, first = await gateway.post(_chat("gpt", temperature=0))
        for _ in range(2):
            status, hit, body = await gateway.post(_chat("gpt", temperature=0))
            assert status == 200 and hit[b"x-hasten-cache"] == b"hit" and body == first
            assert hit[b"x-hasten-cache-key"] == miss[b"x-hasten-cache-key"]
        assert gateway.router.resolved == ["gpt"]  # the repeats took the kept front
        assert len(gateway.app.gateway.fronts) == 1  # type: ignore[union-attr]


async def test_a_repeat_still_obeys_its_cache_control() -> None:
    # The kept front holds the decision for a request without Cache-Control only.
    replies = [Reply(chunks=ANSWER_STREAM), Reply(chunks=ANSWER_STREAM)]
    transport = ScriptedTransport({"a": replies})
    async with InProcess(_config(), transport) as gateway:
        await gateway.post(_chat("gpt", temperature=0))
        no_cache = ((b"cache-control", b"no-cache"),)
        _, headers, _ = await gateway.post(_chat("gpt", temperature=0), no_cache)
        assert headers[b"x-hasten-cache"] == b"bypass" and len(transport.sent) == 2
        _, headers, _ = await gateway.post(_chat("gpt", temperature=0))
        assert headers[b"x-hasten-cache"] == b"hit" and len(transport.sent) == 2


async def test_a_body_refused_by_validation_is_not_kept() -> None:
    transport = ScriptedTransport({"a": []})
    async with InProcess(_config(), transport) as gateway:
        for _ in range(2):
            status, _, body = await gateway.post(_chat("gpt", temperature="hot"))
            assert status == 400 and orjson.loads(body)["error"]["param"] == "temperature"
        assert len(gateway.app.gateway.fronts) == 0  # type: ignore[union-attr]
        assert not transport.sent


async def test_a_hybrid_body_is_decided_on_every_request() -> None:
    hybrid = HybridConfig(model="auto", policy="cloud-only", cloud_model="gpt")
    config = with_hybrid_routes(replace(_config(), hybrid=hybrid))
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM), Reply(chunks=ANSWER_STREAM)]})
    async with InProcess(config, transport) as gateway:
        for _ in range(2):
            _, headers, _ = await gateway.post(_chat("auto"))
            assert headers[b"x-hasten-hybrid"].startswith(b"cloud")
        assert gateway.router.resolved == ["auto@cloud", "auto@cloud"]
        assert len(gateway.app.gateway.fronts) == 0  # type: ignore[union-attr]


async def test_a_bypass_and_a_miss_answer_with_one_head() -> None:
    # A bypass is a flight with one waiter: served by the same exit as a miss, so its head
    # has the same headers in the same order (only a cacheable request names its cache key),
    # and a hit's has the gateway's part of it in that order too.
    transport = ScriptedTransport({"a": [Reply(chunks=ANSWER_STREAM) for _ in range(4)]})
    async with InProcess(_config(), transport) as gateway:
        for stream in (False, True):
            heads: dict[str, list[bytes]] = {}
            for label, temperature in (("bypass", 1), ("miss", 0), ("hit", 0)):
                body = _chat("gpt", temperature=temperature, stream=stream)
                body["messages"] = [{"role": "user", "content": f"stream={stream}"}]
                sent = await gateway.exchange(body)
                names = [name for name, _ in sent[0]["headers"]]
                assert dict(sent[0]["headers"])[b"x-hasten-cache"] == label.encode()
                heads[label] = [name for name in names if name != b"x-hasten-cache-key"]
            assert heads["bypass"] == heads["miss"]
            assert heads["bypass"][0] == b"content-type"
            ours = [b"x-hasten-cache", b"x-hasten-request-id", b"server-timing"]
            for head in heads.values():
                start = head.index(b"x-hasten-cache")
                assert head[start : start + 3] == ours

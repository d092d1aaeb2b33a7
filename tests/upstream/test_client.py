"""Unit tests for hasten.upstream.client: one resolved route in, one ``UpstreamCall`` out,
one pool per route, the affinity key computed from the request, in-flight counts ended."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hasten.config import GatewayConfig, ModelRoute
from hasten.config.routing import RoutingConfig
from hasten.errors import HastenError, UpstreamConnectError
from hasten.routing.models import ModelRouter, ResolvedModel
from hasten.upstream.client import UpstreamClient, request_traits
from tests.support.scripted import Reply, ScriptedTransport, delta, sse, upstream

LONG_PROMPT = "the same long system prompt " * 64
BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _router(**routes: ModelRoute) -> ModelRouter:
    ups = {name: upstream(name) for name in ("a", "b")}
    return ModelRouter(GatewayConfig(upstreams=ups, models=routes))


async def _open(client: UpstreamClient, model: ResolvedModel, *, is_stream: bool = False) -> Any:
    return await client.open(
        model, "/chat/completions", b"{}", {}, parsed=BODY, is_stream=is_stream
    )


def _in_flight(client: UpstreamClient) -> dict[str, dict[str, int]]:
    state: dict[str, Any] = client.routing_state()
    return {
        model: {name: d["in_flight"] for name, d in pool["deployments"].items()}
        for model, pool in state.items()
    }


def test_the_affinity_key_comes_from_the_prompt_prefix_when_affinity_is_on() -> None:
    system = {"role": "system", "content": LONG_PROMPT}
    body = {"messages": [system, {"role": "user", "content": "hi"}], "max_tokens": 7}
    routed = request_traits(body, RoutingConfig(), is_stream=True, is_idempotent=False)
    assert routed.affinity_key is not None
    assert routed.is_stream and not routed.is_idempotent
    assert routed.expected_tokens == 7
    follow_up = {**body, "messages": [system, {"role": "user", "content": "and then?"}]}
    same = request_traits(follow_up, RoutingConfig(), is_stream=False, is_idempotent=True)
    assert same.affinity_key == routed.affinity_key  # only the last message differs
    off = RoutingConfig(is_affinity_enabled=False)
    assert request_traits(body, off, is_stream=True, is_idempotent=True).affinity_key is None


def test_a_short_prompt_has_no_affinity_key_and_max_completion_tokens_wins() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}
    routed = request_traits(
        {**body, "max_tokens": 9}, RoutingConfig(), is_stream=False, is_idempotent=True
    )
    assert routed.affinity_key is None and routed.expected_tokens == 3
    odd = request_traits({"max_tokens": "9"}, RoutingConfig(), is_stream=False, is_idempotent=True)
    assert odd.expected_tokens == 0


async def test_a_call_carries_status_headers_and_body_and_close_ends_its_in_flight() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    client = UpstreamClient(transport, rng=random.Random(1))
    model = _router(m=ModelRoute(name="m", upstream="a")).resolve("m")
    call = await _open(client, model)
    assert call.status == 200 and call.upstream.name == "a"
    assert call.headers["x-request-id"] == "up-1"  # the upstream's own
    assert call.headers["x-hasten-upstream"] == "a"  # and the router's account
    assert call.ttfb_ms >= 0.0
    assert await call.read() == b'{"ok": true}'
    assert _in_flight(client) == {"m": {"a": 1}}
    call.close()
    call.close()  # idempotent: counted out once
    assert _in_flight(client) == {"m": {"a": 0}}
    assert transport.responses[0].is_closed


async def test_every_name_resolved_to_one_route_shares_its_pool() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    client = UpstreamClient(transport, rng=random.Random(1))
    router = _router(**{"*": ModelRoute(name="*", upstream="a")})
    for name in ("llama", "mistral", "llama"):
        (await _open(client, router.resolve(name))).close()
    state: dict[str, Any] = client.routing_state()
    assert list(state) == ["*"]
    assert state["*"]["requests"] == 3


async def test_a_stream_yields_the_head_then_the_rest_and_reports_its_pace() -> None:
    chunks = sse(delta("a"), delta("b"), delta("c"), delta("d"), "[DONE]")
    transport = ScriptedTransport({"a": [Reply(chunks=chunks)]})
    client = UpstreamClient(transport, rng=random.Random(1))
    call = await _open(
        client, _router(m=ModelRoute(name="m", upstream="a")).resolve("m"), is_stream=True
    )
    assert [chunk async for chunk in call.iter_chunks()] == list(chunks)
    call.close()
    deployment = client.routing_state()["m"]["deployments"]["a"]  # type: ignore[index]
    assert deployment["tpot_ms"] is not None  # the stream's pace was learnt


async def test_an_error_response_after_every_retry_is_passed_through() -> None:
    busy = Reply(status=503, chunks=(b'{"error": "busy"}',))
    transport = ScriptedTransport({"a": [busy], "b": [busy]})
    client = UpstreamClient(transport, rng=random.Random(1))
    model = _router(m=ModelRoute(name="m", upstream="a", fallbacks=("b",))).resolve("m")
    call = await _open(client, model)
    assert call.status == 503
    assert await call.read() == b'{"error": "busy"}'
    assert call.headers["x-hasten-failover"] == "a=503, b=503"
    call.close()
    assert _in_flight(client) == {"m": {"a": 0, "b": 0}}


async def test_when_nothing_answered_the_error_is_raised_with_the_routing_headers() -> None:
    refused = Reply(error=UpstreamConnectError("connection refused"))
    transport = ScriptedTransport({"a": [refused]})
    client = UpstreamClient(transport, rng=random.Random(1))
    with pytest.raises(HastenError) as info:
        await _open(client, _router(m=ModelRoute(name="m", upstream="a")).resolve("m"))
    assert isinstance(info.value, UpstreamConnectError)
    assert info.value.headers["x-hasten-upstream"] == "a"
    assert info.value.headers["x-hasten-failover"] == "a=connect_error"
    assert _in_flight(client) == {"m": {"a": 0}}


async def test_an_unrouted_get_keeps_no_pool_and_adds_no_routing_headers() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    client = UpstreamClient(transport, rng=random.Random(1))
    call = await client.get(upstream("a"), "/models", {"accept": "application/json"})
    assert call.status == 200 and "x-hasten-upstream" not in call.headers
    assert await call.read() == b'{"ok": true}'
    call.close()
    assert client.routing_state() == {}
    assert transport.sent[0].method == "GET"


async def test_aclose_closes_the_transport() -> None:
    transport = ScriptedTransport({"a": [Reply()]})
    await UpstreamClient(transport).aclose()
    assert transport.is_closed


async def test_an_event_stream_is_forwarded_in_whole_events_and_a_bad_one_ends_it() -> None:
    first, second = sse(delta("a"), delta("b"))
    chunks = (first + second[:9], second[9:], b'data: {"choices": [\n\n', *sse("[DONE]"))
    event_stream = {"content-type": "text/event-stream"}
    transport = ScriptedTransport({"a": [Reply(chunks=chunks, headers=event_stream)]})
    client = UpstreamClient(transport, rng=random.Random(1))
    call = await _open(
        client, _router(m=ModelRoute(name="m", upstream="a")).resolve("m"), is_stream=True
    )
    forwarded = []
    with pytest.raises(HastenError) as caught:
        async for chunk in call.iter_chunks():
            forwarded.append(chunk)
    call.close()
    assert forwarded == [first, second]  # never half an event, never the bad one
    assert caught.value.code == "upstream_malformed"

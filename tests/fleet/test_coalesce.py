"""Coalescing across replicas: in-process gateways sharing one real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from hasten.config import GatewayConfig
from hasten.config.fleet import FleetConfig
from hasten.config.tables import CacheConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import GatewayProcess, ServerThread, redis_server

URL = "/v1/chat/completions"


# These replicas are threads sharing one GIL with the client and each other: on a busy
# machine the default 0.25 s op timeout can lapse during start-up (once, the routing sync's
# first TIME), which marks Redis away for a second and lets each replica call upstream.
# What is tested here is coalescing, not how a slow Redis is detected.
OP_TIMEOUT_S = 2.0


def fleet_config(sim_url: str, redis_url: str, **fleet: Any) -> GatewayConfig:
    config = make_config({"sim": sim_url + "/v1"})
    fleet = {"op_timeout_s": OP_TIMEOUT_S, **fleet}
    return replace(config, fleet=FleetConfig(redis_url=redis_url, **fleet))


@contextlib.contextmanager
def replicas(config: GatewayConfig, count: int) -> Iterator[list[ServerThread]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_gateway(config)) for _ in range(count)]


def stream_text(body: str) -> str:
    text = ""
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = orjson.loads(line[6:])
        assert "error" not in event, event
        for choice in event["choices"]:
            text += choice["delta"].get("content") or ""
    return text


async def ask(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> str:
    """The answer's text, stream or not; fails on any error."""
    response = await http.post(base + URL, json=body)
    assert response.status_code == 200, response.text
    if body.get("stream"):
        assert response.text.endswith("data: [DONE]\n\n"), response.text[-300:]
        return stream_text(response.text)
    return str(response.json()["choices"][0]["message"]["content"])


async def test_identical_requests_over_replicas_make_one_upstream_call() -> None:
    sim_config = SimConfig(ttft_base_ms=150, decode_ms_per_token=10, output_tokens=30)
    with redis_server() as redis_url, ServerThread(build_app(sim_config)) as sim:
        with replicas(fleet_config(sim.url, redis_url), 3) as gateways:
            async with httpx.AsyncClient(timeout=30) as http:
                asks = [
                    ask(
                        http,
                        gateways[i % 3].url,
                        chat_body("fleet coalesce", stream=i % 2 == 0, max_tokens=30),
                    )
                    for i in range(24)
                ]
                texts = await asyncio.gather(*asks)
                assert len(set(texts)) == 1 and texts[0]
                assert sim_stats(sim.url)["num_requests"] == 1
                # Every replica kept the answer: the followers in their own L1.
                body = chat_body("fleet coalesce", max_tokens=30)
                again = [await http.post(g.url + URL, json=body) for g in gateways]
            assert [r.headers["x-hasten-cache"] for r in again] == ["hit"] * 3
            assert {r.json()["choices"][0]["message"]["content"] for r in again} == set(texts)
            assert sim_stats(sim.url)["num_requests"] == 1


async def first_events(
    http: httpx.AsyncClient, base: str, body: dict[str, Any], num_events: int
) -> tuple[asyncio.Task[str], asyncio.Event]:
    """A stream request in the background, and an event set once ``num_events`` arrived."""
    seen = asyncio.Event()

    async def run() -> str:
        async with http.stream("POST", base + URL, json=body) as response:
            assert response.status_code == 200
            parts: list[str] = []
            async for part in response.aiter_text():
                parts.append(part)
                if "".join(parts).count("data: ") >= num_events:
                    seen.set()
            text = "".join(parts)
            seen.set()
            return text

    return asyncio.create_task(run()), seen


def coalesced_waiters(base: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if line.startswith("hasten_coalesced_waiters_total "):
            return float(line.split()[1])
    raise AssertionError("no hasten_coalesced_waiters_total")


def reference_text(sim_url: str, body: dict[str, Any]) -> str:
    """The uncut answer, asked of the simulator directly (it is deterministic)."""
    response = httpx.post(sim_url + URL, json={**body, "stream": False}, timeout=30)
    return str(response.json()["choices"][0]["message"]["content"])


async def test_late_joiner_on_another_replica_gets_the_whole_answer() -> None:
    sim_config = SimConfig(ttft_base_ms=50, decode_ms_per_token=25)
    with redis_server() as redis_url, ServerThread(build_app(sim_config)) as sim:
        with replicas(fleet_config(sim.url, redis_url), 2) as (a, b):
            body = chat_body("late joiner fleet", stream=True, max_tokens=30)
            async with httpx.AsyncClient(timeout=30) as http:
                first, seen = await first_events(http, a.url, body, 8)
                await asyncio.wait_for(seen.wait(), 20)
                late = await http.post(b.url + URL, json=body)
                early = await first
            assert late.text.endswith("data: [DONE]\n\n")
            assert stream_text(late.text) == stream_text(early)
            assert late.headers["x-hasten-cache"] == "coalesced"
            assert sim_stats(sim.url)["num_requests"] == 1
            # B's request waited on A's call: counted as coalesced there, not as a call.
            assert [coalesced_waiters(r.url) for r in (a, b)] == [0.0, 1.0]


def serve_config(tmp_path: Path, sim_url: str, redis_url: str, lease_s: float) -> Path:
    """A TOML config for a replica run as its own process (so it can be killed)."""
    path = tmp_path / "replica.toml"
    path.write_text(
        f'[upstreams.sim]\nurl = "{sim_url}/v1"\n'
        f'[models.sim-model]\nupstream = "sim"\n'
        f'[fleet]\nredis_url = "{redis_url}"\nlease_s = {lease_s}\n'
    )
    return path


async def test_killed_leader_mid_stream_costs_at_most_one_more_call(tmp_path: Path) -> None:
    sim_config = SimConfig(ttft_base_ms=50, decode_ms_per_token=40)
    body = chat_body("leader dies", stream=True, max_tokens=60)
    with redis_server() as redis_url, ServerThread(build_app(sim_config)) as sim:
        leader = GatewayProcess("--config", str(serve_config(tmp_path, sim.url, redis_url, 0.6)))
        with leader, replicas(fleet_config(sim.url, redis_url, lease_s=0.6), 2) as (b, c):
            async with httpx.AsyncClient(timeout=30) as http:
                _, led = await first_events(http, leader.url, body, 6)
                await asyncio.wait_for(led.wait(), 20)
                followers = [await first_events(http, r.url, body, 8) for r in (b, c, b, c)]
                for _, seen in followers:
                    await asyncio.wait_for(seen.wait(), 20)
                whole = [ask(http, r.url, {**body, "stream": False}) for r in (b, c)]
                assert leader.proc is not None
                leader.proc.kill()  # mid-stream: no end entry, the lease lapses
                streamed = [stream_text(await task) for task, _ in followers]
                assembled = await asyncio.gather(*whole)
            num_calls = sim_stats(sim.url)["num_requests"]
            expected = reference_text(sim.url, body)
            assert set(streamed) == set(assembled) == {expected}
            # The dead leader's call and one takeover: at most one extra upstream call.
            assert num_calls == 2


async def test_redis_lost_mid_stream_every_client_still_gets_the_whole_answer() -> None:
    sim_config = SimConfig(ttft_base_ms=50, decode_ms_per_token=40)
    body = chat_body("redis dies", stream=True, max_tokens=50)
    with redis_server() as redis_url, ServerThread(build_app(sim_config)) as sim:
        with replicas(fleet_config(sim.url, redis_url), 3) as gateways:
            async with httpx.AsyncClient(timeout=30) as http:
                streams = [await first_events(http, g.url, body, 6) for g in gateways]
                for _, seen in streams:
                    await asyncio.wait_for(seen.wait(), 20)
                whole = [ask(http, g.url, {**body, "stream": False}) for g in gateways]
                with contextlib.suppress(redis.exceptions.ConnectionError):
                    redis.Redis.from_url(redis_url).shutdown(nosave=True)
                streamed = [stream_text(await task) for task, _ in streams]
                assembled = await asyncio.gather(*whole)
            num_calls = sim_stats(sim.url)["num_requests"]
            assert set(streamed) == set(assembled) == {reference_text(sim.url, body)}
            # The leader's call, then each follower replica calls upstream itself.
            assert 1 < num_calls <= 3


async def test_redis_away_from_the_start_each_replica_answers_alone() -> None:
    with ServerThread(build_app(SimConfig(ttft_base_ms=50))) as sim:
        with redis_server() as gone_url:
            pass  # a port where nothing listens any more
        with replicas(fleet_config(sim.url, gone_url), 2) as gateways:
            body = chat_body("no redis", max_tokens=10)
            async with httpx.AsyncClient(timeout=30) as http:
                texts = await asyncio.gather(*(ask(http, g.url, body) for g in gateways * 3))
            assert len(set(texts)) == 1 and texts[0]
            assert sim_stats(sim.url)["num_requests"] == 2  # local coalescing still holds


async def test_stream_entries_expire() -> None:
    with redis_server() as redis_url, ServerThread(build_app(SimConfig())) as sim:
        config = fleet_config(sim.url, redis_url, stream_ttl_s=2.0, lease_s=0.3)
        with replicas(config, 1) as (gateway,):
            async with httpx.AsyncClient(timeout=30) as http:
                await ask(http, gateway.url, chat_body("expiring", stream=True, max_tokens=5))
            client = redis.Redis.from_url(redis_url)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not (streams := client.keys("hasten:fleet:flight:*:*")):
                assert loop.time() < deadline, "the writer never published"  # it runs after
                await asyncio.sleep(0.01)
            assert len(streams) == 1 and client.type(streams[0]) == b"stream"
            assert 0 < client.pttl(streams[0]) <= 2000
            entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(streams[0])  # type: ignore[assignment]
            kinds = [fields[b"k"] for _, fields in entries]
            assert kinds[0] == b"s" and kinds[-1] == b"e" and set(kinds[1:-1]) == {b"c"}
            deadline = loop.time() + 20
            while client.keys("hasten:fleet:flight:*"):  # the stream, and the lease's marker
                assert loop.time() < deadline, "fleet keys never expired"
                await asyncio.sleep(0.05)


async def test_a_whole_json_answer_is_shared_too() -> None:
    """Embeddings come back as one JSON body: a follower passes it on once it is whole."""
    with redis_server() as redis_url, ServerThread(build_app(SimConfig(ttft_base_ms=300))) as sim:
        with replicas(fleet_config(sim.url, redis_url), 2) as gateways:
            body = {"model": "sim-model", "input": "shared embedding"}
            async with httpx.AsyncClient(timeout=30) as http:
                replies = await asyncio.gather(
                    *(http.post(g.url + "/v1/embeddings", json=body) for g in gateways * 4)
                )
            assert {r.status_code for r in replies} == {200}
            assert len({r.content for r in replies}) == 1
            assert orjson.loads(replies[0].content)["data"][0]["embedding"]
            stats = sim_stats(sim.url)
            assert stats["num_requests"] == 1 and stats["num_embedding_inputs"] == 1


LEASES = "hasten:fleet:flight:" + "?" * 32  # leases, not their streams


def _is_done(value: object) -> bool:
    return isinstance(value, bytes) and value.startswith(b"done:")


def _calls(client: redis.Redis, *names: str) -> int:
    stats: dict[str, dict[str, int]] = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


async def test_a_miss_takes_one_lease_and_an_l1_hit_asks_redis_nothing() -> None:
    with redis_server() as redis_url, ServerThread(build_app(SimConfig())) as sim:
        with replicas(fleet_config(sim.url, redis_url), 1) as (gateway,):
            client = redis.Redis.from_url(redis_url)
            body = chat_body("early lease", max_tokens=5)
            async with httpx.AsyncClient(timeout=30) as http:
                sets = _calls(client, "set")
                await ask(http, gateway.url, body)
                await asyncio.sleep(0.3)  # the deferred end (its done marker is a SET too)
                assert _calls(client, "set") - sets == 2
                before = _calls(client, "set", "get", "evalsha", "eval", "del")
                for _ in range(3):
                    await ask(http, gateway.url, body)
                await asyncio.sleep(0.3)
                assert _calls(client, "set", "get", "evalsha", "eval", "del") == before


async def test_an_early_lease_a_hit_did_not_need_is_given_back() -> None:
    """A replica misses L1 (so it asks for the lease) but finds the answer in the shared L2."""
    with redis_server() as redis_url, ServerThread(build_app(SimConfig())) as sim:
        # A lease far longer than the wait below: only a give-back removes it in time.
        config = fleet_config(sim.url, redis_url, lease_s=30.0)
        cache = CacheConfig(backend="redis", redis_url=redis_url)
        config = replace(config, cache=cache)
        with replicas(config, 2) as (first, second):
            client = redis.Redis.from_url(redis_url)
            body = chat_body("given back", max_tokens=5)
            async with httpx.AsyncClient(timeout=30) as http:
                text = await ask(http, first.url, body)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                # The first flight's end is written after its answer: wait for its marker.
                while not any(_is_done(client.get(k)) for k in client.keys(LEASES)):
                    assert loop.time() < deadline, "the first flight left no done marker"
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.2)  # the first replica's L2 write
                client.delete(*client.keys(LEASES))  # as if the marker lapsed: the next ask wins
                response = await http.post(second.url + URL, json=body)
                assert response.headers["x-hasten-cache"] == "hit"
                assert response.json()["choices"][0]["message"]["content"] == text
                deadline = loop.time() + 5
                while client.keys(LEASES):
                    assert loop.time() < deadline, "the unneeded lease was never given back"
                    await asyncio.sleep(0.01)
            assert sim_stats(sim.url)["num_requests"] == 1


async def test_a_follower_of_a_given_back_lease_takes_over_at_once() -> None:
    """A lease given back before any upstream call (its request hit) wakes its followers,
    who call upstream as a first leader would: even a request that must not run twice."""
    with redis_server() as redis_url, ServerThread(build_app(SimConfig())) as sim:
        # Blocks of 10 s: without the released entry the follower would still be waiting.
        config = fleet_config(sim.url, redis_url, lease_s=30.0)
        with replicas(config, 2) as (first, second):
            client = redis.Redis.from_url(redis_url)
            body = chat_body("released", max_tokens=5)
            async with httpx.AsyncClient(timeout=8) as http:
                await ask(http, first.url, body)  # learns the flight's lease key
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while not any(_is_done(client.get(k)) for k in client.keys(LEASES)):
                    assert loop.time() < deadline, "the first flight left no done marker"
                    await asyncio.sleep(0.01)
                (lease,) = client.keys(LEASES)
                assert isinstance(lease, bytes)
                client.set(lease, "other-replica", px=30_000)  # held by a replica that hits
                headers = {"x-hasten-idempotent": "false"}
                asked = http.post(second.url + URL, json=body, headers=headers)
                follow = asyncio.create_task(asked)
                deadline = loop.time() + 5
                while not client.info("clients")["blocked_clients"]:  # its XREAD BLOCK
                    assert loop.time() < deadline, "the second replica never followed"
                    await asyncio.sleep(0.01)
                stream = f"{lease.decode()}:other-replica"
                client.xadd(stream, {"k": "r", "n": "0", "d": "", "u": "0"})
                client.delete(lease)
                response = await follow
            assert response.status_code == 200, response.text
            assert sim_stats(sim.url)["num_requests"] == 2

"""Exact cache through the gateway: hit/miss/bypass, replay forms, restart, tenants, failures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from hasten.config import CacheConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _post(gateway: ServerThread, body: object, **headers: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def _calls(sim: ServerThread) -> int:
    return int(sim_stats(sim.url)["num_requests"])


def _stream_text(response: httpx.Response) -> str:
    parts = []
    for line in response.text.split("\n\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            event = orjson.loads(line[6:])
            for choice in event.get("choices", []):
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def test_hit_miss_bypass_headers(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        first, second = _post(gateway, chat_body("q")), _post(gateway, chat_body("q"))
        assert first.headers["x-hasten-cache"] == "miss"
        assert second.headers["x-hasten-cache"] == "hit"
        assert first.json() == second.json()
        assert _calls(sim) == 1
        hot = {**chat_body("q"), "temperature": 0.7}
        assert _post(gateway, hot).headers["x-hasten-cache"] == "bypass"
        assert _post(gateway, hot).headers["x-hasten-cache"] == "bypass"
        assert _calls(sim) == 3
        seeded = {**hot, "seed": 5}
        assert _post(gateway, seeded).headers["x-hasten-cache"] == "miss"
        assert _post(gateway, seeded).headers["x-hasten-cache"] == "hit"
        # Key order and formatting do not matter; content does.
        reordered = {
            "temperature": 0,
            "messages": [{"content": "q", "role": "user"}],
            "model": "sim-model",
        }
        assert _post(gateway, reordered).headers["x-hasten-cache"] == "hit"
        assert _post(gateway, chat_body("q ")).headers["x-hasten-cache"] == "miss"


def test_cache_control_directives(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        _post(gateway, chat_body("cc"))
        fresh = _post(gateway, chat_body("cc"), **{"cache-control": "no-cache"})
        assert fresh.headers["x-hasten-cache"] == "bypass"
        assert _calls(sim) == 2
        assert (
            _post(gateway, chat_body("cc"), **{"cache-control": "max-age=0"}).headers[
                "x-hasten-cache"
            ]
            == "bypass"
        )
        assert _calls(sim) == 3
        assert (
            _post(gateway, chat_body("cc"), **{"cache-control": "max-age=600"}).headers[
                "x-hasten-cache"
            ]
            == "hit"
        )
        _post(gateway, chat_body("ns"), **{"cache-control": "no-store"})
        assert _post(gateway, chat_body("ns")).headers["x-hasten-cache"] == "miss"


def test_stream_to_json_and_json_to_stream_replay(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        streamed = _post(gateway, chat_body("s2j", stream=True))
        as_json = _post(gateway, chat_body("s2j"))
        assert as_json.headers["x-hasten-cache"] == "hit"
        assert as_json.json()["choices"][0]["message"]["content"] == _stream_text(streamed)
        assert as_json.json()["object"] == "chat.completion"

        body = _post(gateway, chat_body("j2s")).json()
        replay = _post(gateway, chat_body("j2s", stream=True))
        assert replay.headers["x-hasten-cache"] == "hit"
        assert replay.headers["content-type"].startswith("text/event-stream")
        assert _stream_text(replay) == body["choices"][0]["message"]["content"]
        assert replay.text.endswith("data: [DONE]\n\n")
        assert _calls(sim) == 2


def test_sqlite_cache_survives_restart(sim: ServerThread, tmp_path: Path) -> None:
    cache = CacheConfig(backend="sqlite", sqlite_path=str(tmp_path / "cache.sqlite3"))
    config = make_config({"sim": sim.url + "/v1"}, cache=cache)
    with running_gateway(config) as gateway:
        answer = _post(gateway, chat_body("persist")).json()
    with running_gateway(config) as gateway:
        again = _post(gateway, chat_body("persist"))
    assert again.headers["x-hasten-cache"] == "hit"
    assert again.json() == answer
    assert _calls(sim) == 1


def test_redis_tier_shared_by_two_gateways(sim: ServerThread, redis_url: str) -> None:
    cache = CacheConfig(backend="redis", redis_url=redis_url)
    config = make_config({"sim": sim.url + "/v1"}, cache=cache)
    with running_gateway(config) as one, running_gateway(config) as two:
        client_one = openai.OpenAI(base_url=one.url + "/v1", api_key="k")
        client_two = openai.OpenAI(base_url=two.url + "/v1", api_key="k")
        text = f"redis shared {time.time()}"
        first = client_one.chat.completions.create(**chat_body(text))
        # The L2 write is in the background: poll the second replica briefly.
        for _ in range(50):
            raw = client_two.chat.completions.with_raw_response.create(**chat_body(text))
            if raw.headers["x-hasten-cache"] == "hit":
                break
            time.sleep(0.05)
        assert raw.headers["x-hasten-cache"] == "hit"
        assert raw.parse().choices[0].message.content == first.choices[0].message.content


def test_failed_and_truncated_answers_are_not_cached() -> None:
    with ServerThread(build_app(SimConfig(disconnect_rate=1.0))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            cut = _post(gateway, chat_body("cut", stream=True))
            assert "data: [DONE]" not in cut.text
            assert '"error"' in cut.text.split("\n\n")[-2]
            assert _post(gateway, chat_body("cut", stream=True)).headers["x-hasten-cache"] == "miss"
    with ServerThread(build_app(SimConfig(error_rate=1.0))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            assert _post(gateway, chat_body("boom")).status_code >= 500
            assert _post(gateway, chat_body("boom")).headers.get("x-hasten-cache") != "hit"


def test_cancelled_stream_is_not_cached() -> None:
    with ServerThread(build_app(SimConfig(decode_ms_per_token=50))) as sim:
        with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
            body = chat_body("cancel me", stream=True, max_tokens=40)
            with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as r:
                next(r.iter_bytes())
            for _ in range(100):
                if sim_stats(sim.url)["num_cancelled"] >= 1:
                    break
                time.sleep(0.05)
            assert sim_stats(sim.url)["num_cancelled"] == 1
            assert _post(gateway, body).headers["x-hasten-cache"] == "miss"


def test_tenant_b_never_gets_tenant_a_answer(sim: ServerThread) -> None:
    config = make_config({"sim": sim.url + "/v1"}, api_keys=[("a", "key-a"), ("b", "key-b")])
    with running_gateway(config) as gateway:
        a = {"authorization": "Bearer key-a"}
        b = {"authorization": "Bearer key-b"}
        assert _post(gateway, chat_body("secret"), **a).headers["x-hasten-cache"] == "miss"
        assert _post(gateway, chat_body("secret"), **a).headers["x-hasten-cache"] == "hit"
        assert _post(gateway, chat_body("secret"), **b).headers["x-hasten-cache"] == "miss"
        assert _calls(sim) == 2


def test_passthrough_keys_are_separate_namespaces(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        one = {"authorization": "Bearer user-one"}
        two = {"authorization": "Bearer user-two"}
        _post(gateway, chat_body("mine"), **one)
        assert _post(gateway, chat_body("mine"), **two).headers["x-hasten-cache"] == "miss"
        assert _post(gateway, chat_body("mine"), **one).headers["x-hasten-cache"] == "hit"


def test_paced_replay_spaces_the_frames(sim: ServerThread) -> None:
    cache = CacheConfig(backend="memory", replay="paced", replay_chunk_interval_ms=10)
    with running_gateway(make_config({"sim": sim.url + "/v1"}, cache=cache)) as gateway:
        body = chat_body("paced", stream=True)
        first = _post(gateway, body)
        started_s = time.perf_counter()
        replay = _post(gateway, body)
        elapsed_s = time.perf_counter() - started_s
    assert replay.headers["x-hasten-cache"] == "hit"
    assert replay.text == first.text
    num_frames = replay.text.count("data: ")
    # A lower bound only: sleeps never end early, so this cannot flake on a slow machine.
    assert elapsed_s >= (num_frames - 1) * 0.010


def test_every_response_carries_the_standard_headers(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        for path in ("/healthz", "/readyz", "/v1/models", "/stats"):
            response = httpx.get(gateway.url + path)
            assert response.headers["x-hasten-cache"] == "bypass", path
            assert response.headers["server-timing"].startswith("hasten;dur="), path

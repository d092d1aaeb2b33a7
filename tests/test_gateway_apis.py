"""The OpenAI Responses and Anthropic Messages APIs through the gateway, with the official
SDKs: translated for a chat-only upstream, passed through for one that speaks them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import anthropic
import httpx
import openai
import pytest

from hasten.config import CacheConfig, GatewayConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.config.tables import CLIENT_APIS
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

MEMORY_CACHE = CacheConfig(backend="memory")


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as server:
        yield server


def _config(sim_url: str, *, apis: tuple[str, ...] = ()) -> GatewayConfig:
    config = make_config({"sim": sim_url + "/v1"}, cache=MEMORY_CACHE, apis=apis)
    # The Anthropic SDK sends no temperature: its requests are cached by this setting.
    routes = {
        name: replace(route, cache=ModelCachePolicy(is_deterministic_only=False))
        for name, route in config.models.items()
    }
    return replace(config, models=routes)


@pytest.mark.parametrize("apis", [(), CLIENT_APIS], ids=["translated", "native"])
def test_responses_create_and_stream_with_the_openai_sdk(
    sim: ServerThread, apis: tuple[str, ...]
) -> None:
    with running_gateway(_config(sim.url, apis=apis)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)
        first = client.responses.create(
            model="sim-model", input="What is the capital of France?", temperature=0
        )
        assert first.id.startswith("resp_") and first.output_text
        assert first.status == "completed" and first.usage is not None
        again = client.responses.with_raw_response.create(
            model="sim-model", input="What is the capital of France?", temperature=0
        )
        assert again.headers["x-hasten-cache"] == "hit"
        repeated = again.parse()
        assert repeated.output_text == first.output_text and repeated.id != first.id
        with client.responses.stream(
            model="sim-model", input="What is the capital of Spain?", temperature=0
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds and final.output_text


@pytest.mark.parametrize("apis", [(), CLIENT_APIS], ids=["translated", "native"])
def test_messages_create_and_stream_with_the_anthropic_sdk(
    sim: ServerThread, apis: tuple[str, ...]
) -> None:
    with running_gateway(_config(sim.url, apis=apis)) as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-test", max_retries=0)
        ask: anthropic.types.MessageParam = {
            "role": "user",
            "content": "What is the capital of France?",
        }
        first = client.messages.create(model="sim-model", max_tokens=64, messages=[ask])
        assert first.id.startswith("msg_") and first.content and first.stop_reason
        raw = client.messages.with_raw_response.create(
            model="sim-model", max_tokens=64, messages=[ask]
        )
        assert raw.headers["x-hasten-cache"] == "hit"
        repeated = raw.parse()
        assert repeated.content == first.content and repeated.id != first.id
        with client.messages.stream(
            model="sim-model", max_tokens=64, messages=[{"role": "user", "content": "And Spain?"}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text and final.stop_reason is not None
        counted = client.messages.count_tokens(model="sim-model", messages=[ask])
        assert counted.input_tokens > 0


def test_a_bad_messages_request_gets_anthropics_error_shape(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        answer = httpx.post(f"{gateway.url}/v1/messages", json={"model": "sim-model"})
    assert answer.status_code == 400
    assert (
        answer.json()["type"] == "error"
        and answer.json()["error"]["type"] == "invalid_request_error"
    )


def test_native_pass_through_reaches_the_upstream_on_its_own_api(sim: ServerThread) -> None:
    before = sim_stats(sim.url)["num_requests_by_endpoint"]
    with running_gateway(_config(sim.url, apis=CLIENT_APIS)) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)
        client.responses.create(model="sim-model", input="native one", temperature=0.5)
    after = sim_stats(sim.url)["num_requests_by_endpoint"]
    assert after.get("responses", 0) == before.get("responses", 0) + 1


def test_metrics_and_the_access_record_name_the_api(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-test", max_retries=0)
        client.messages.create(
            model="sim-model", max_tokens=16, messages=[{"role": "user", "content": "label me"}]
        )
        scraped = httpx.get(f"{gateway.url}/metrics").text
    lines = [line for line in scraped.splitlines() if line.startswith("hasten_requests_total{")]
    assert any('api="messages"' in line for line in lines), lines

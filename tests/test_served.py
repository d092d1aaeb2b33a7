"""served_config: the config actually served, and the app serving any parsed config."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hasten.config import WILDCARD_MODEL, GatewayConfig, parse_config
from hasten.errors import ConfigError
from hasten.local.gateway import LOCAL
from hasten.served import DEMO_UPSTREAM, Overrides, served_config
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread


def _hybrid_document(cloud_url: str, policy: str = "local-first") -> dict[str, Any]:
    return {
        "upstreams": {"cloud": {"url": cloud_url}},
        "models": {"gpt": {"upstream": "cloud"}},
        "cache": {"backend": "memory"},
        "hybrid": {"policy": policy, "cloud_model": "gpt"},
    }


@pytest.fixture(scope="module")
def cloud() -> Iterator[ServerThread]:
    with ServerThread(build_sim(SimConfig())) as server:
        yield server


def test_a_parsed_hybrid_config_is_served_as_given(cloud: ServerThread) -> None:
    parsed = parse_config(_hybrid_document(cloud.url + "/v1"), {})
    assert "auto@local" not in parsed.models  # the routes are the served config's, not the file's
    with running_gateway(parsed) as gateway:
        easy = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=easy)
        assert response.status_code == 200, response.text
        # No engine runs: the local tier is absent and the cloud answers the easy request.
        assert response.headers["x-hasten-hybrid"] == "local; reason=easy"
        assert response.headers["x-hasten-upstream"] == "cloud"
        hard = {"model": "auto", "messages": [{"role": "user", "content": "prove it"}]}
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=hard)
        assert response.status_code == 200, response.text
        assert response.headers["x-hasten-hybrid"] == "cloud; reason=complex"


def test_hybrid_routes_with_the_local_engine() -> None:
    parsed = parse_config(_hybrid_document("http://cloud/v1"), {})
    served = served_config(parsed, local_url="http://127.0.0.1:9/v1")
    local_first = served.models["auto@local"]
    assert (local_first.upstream, local_first.fallbacks) == (LOCAL, ("cloud",))
    cloud_first = served.models["auto@cloud"]
    assert (cloud_first.upstream, cloud_first.fallbacks) == ("cloud", (LOCAL,))
    assert served.upstreams[LOCAL].url == "http://127.0.0.1:9/v1"


def test_hybrid_routes_take_the_cloud_models_parameter_policy() -> None:
    document = _hybrid_document("http://cloud/v1")
    document["models"]["gpt"]["policy"] = {"max_tokens_cap": 64}
    served = served_config(parse_config(document, {}), local_url="http://127.0.0.1:9/v1")
    for name in ("auto@local", "auto@cloud"):
        policy = served.models[name].policy
        assert policy is not None and policy.max_tokens_cap == 64


def test_served_config_applied_again_changes_nothing() -> None:
    parsed = parse_config(_hybrid_document("http://cloud/v1", "cloud-first"), {})
    overrides = Overrides(port=0, redis_url="redis://r:1")
    once = served_config(parsed, overrides, local_url="http://l/v1")
    assert served_config(once) == once
    # As `hasten serve` does it: overrides first, the engine's URL once the child listens.
    assert served_config(served_config(parsed, overrides), local_url="http://l/v1") == once


def test_demo_upstream_only_without_configured_upstreams() -> None:
    demo = served_config(GatewayConfig(), demo_url="http://127.0.0.1:1/v1")
    assert list(demo.upstreams) == [DEMO_UPSTREAM]
    assert demo.models[WILDCARD_MODEL].upstream == DEMO_UPSTREAM
    parsed = parse_config(_hybrid_document("http://cloud/v1"), {})
    assert served_config(parsed, demo_url="http://127.0.0.1:1/v1").upstreams.keys() == {"cloud"}


def test_local_engine_answers_every_name_without_a_cloud() -> None:
    served = served_config(GatewayConfig(), local_url="http://l/v1")
    assert served.models[WILDCARD_MODEL].upstream == LOCAL
    assert served.models[LOCAL].upstream == LOCAL


def test_overrides_beat_the_file() -> None:
    parsed = parse_config({"server": {"port": 9000, "host": "0.0.0.0"}}, {})
    served = served_config(
        parsed,
        Overrides(port=0, log_format="json", redis_url="redis://r:1", upstream_url="http://u/v1"),
    )
    assert served.server.port == 0 and served.server.host == "0.0.0.0"
    assert served.server.log_format == "json"
    assert served.cache.backend == "redis" and served.cache.redis_url == "redis://r:1"
    assert served.models[WILDCARD_MODEL].upstream == "default"
    assert served_config(parsed, Overrides()).server.port == 9000
    assert served_config(parsed, Overrides(is_cache_disabled=True)).cache.is_enabled is False


def test_overrides_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"^--cache-backend/--redis-url\.redis_url:"):
        served_config(GatewayConfig(), Overrides(cache_backend="redis"))
    with pytest.raises(ConfigError, match=r"^--upstream:"):
        served_config(GatewayConfig(), Overrides(upstream_url="api.example.com"))

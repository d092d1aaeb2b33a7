"""Unit tests for hasten.upstream.dispatch: the request spec sent to each deployment."""

from __future__ import annotations

import random
from typing import Any, cast

import orjson

from hasten.config import UpstreamConfig
from hasten.routing.pool import DeploymentPool
from hasten.routing.settings import DeploymentConfig, RoutingConfig
from hasten.upstream.dispatch import Dispatch, RouteRequest
from hasten.upstream.transport import Transport


def _spec_body(is_prompt_cache_key: bool, body: dict[str, Any], key: int | None) -> Any:
    deployment = DeploymentConfig(upstream="a", is_prompt_cache_key=is_prompt_cache_key)
    pool = DeploymentPool([deployment], RoutingConfig(), random.Random(1))
    dispatch = Dispatch(
        cast(Transport, None),  # never used: the spec is built, not sent
        pool,
        {"a": UpstreamConfig(name="a", url="http://127.0.0.1:9/v1")},
        RouteRequest(model="m", affinity_key=key),
        path="/chat/completions",
        body=orjson.dumps(body),
        headers={},
        rng=random.Random(1),
    )
    return orjson.loads(dispatch._spec("a").body)


def test_prompt_cache_key_is_set_only_for_upstreams_configured_with_it() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert _spec_body(True, body, 0xABC)["prompt_cache_key"] == "hasten-0000000000000abc"
    assert "prompt_cache_key" not in _spec_body(False, body, 0xABC)
    assert "prompt_cache_key" not in _spec_body(True, body, None)  # no affinity key
    own = {**body, "prompt_cache_key": "mine"}
    assert _spec_body(True, own, 0xABC)["prompt_cache_key"] == "mine"  # the client's wins

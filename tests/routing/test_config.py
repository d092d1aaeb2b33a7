"""TOML keys for deployments and routing: defaults, parsed values, precise error messages."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config import parse_config
from hasten.config.routing import DeploymentConfig
from hasten.errors import ConfigError

UPSTREAMS = {
    "east": {"url": "http://127.0.0.1:1/v1"},
    "west": {"url": "http://127.0.0.1:2/v1"},
    "spare": {"url": "http://127.0.0.1:3/v1"},
}


def _parse(model: dict[str, Any]) -> Any:
    return parse_config({"upstreams": UPSTREAMS, "models": {"gpt": model}}, {})


def _error(model: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        _parse(model)
    return str(info.value)


def test_deployments_and_routing_tables_parse() -> None:
    config = _parse(
        {
            "deployments": [
                {"upstream": "spare", "priority": 1},
                {"upstream": "east", "weight": 2, "max_concurrency": 64, "ttft_timeout_s": 1.5},
                {"upstream": "west", "prompt_cache_key": True},
            ],
            "routing": {
                "ttft_timeout_s": 3,
                "affinity_load_factor": 1.5,
                "affinity_key_load_factor": 1.2,
                "affinity_max_keys": 500,
                "explore_decay_s": 12,
                "probe_interval_s": 0,
                "hedge": {
                    "enabled": True,
                    "quantile": 0.9,
                    "budget": 0.1,
                    "max_delay_ms": 800,
                    "max_hedges": 1,
                    "second_quantile": 0.7,
                    "budget_burst": 10,
                },
                "breaker": {"consecutive_failures": 3, "cooldown_s": 2},
            },
        }
    )
    route = config.models["gpt"]
    # Best priority first; the derived upstream/fallbacks keep older code paths working.
    assert route.upstream == "east" and route.fallbacks == ("west", "spare")
    routing = route.routing
    assert routing.deployments[0] == DeploymentConfig(
        upstream="east", weight=2.0, max_concurrency=64, ttft_timeout_s=1.5
    )
    assert routing.deployments[1].is_prompt_cache_key
    assert routing.ttft_timeout_s == 3.0 and routing.affinity_load_factor == 1.5
    assert routing.affinity_key_load_factor == 1.2 and routing.affinity_max_keys == 500
    assert routing.explore_decay_s == 12.0
    assert routing.hedge.is_enabled and routing.hedge.quantile == 0.9
    assert routing.hedge.budget == 0.1 and routing.hedge.max_delay_ms == 800
    assert routing.hedge.max_hedges == 1 and routing.hedge.second_quantile == 0.7
    assert routing.hedge.budget_burst == 10.0
    assert routing.breaker.max_consecutive_failures == 3 and routing.breaker.cooldown_s == 2


def test_plain_routes_get_default_routing() -> None:
    route = _parse({"upstream": "east", "fallbacks": ["west"]}).models["gpt"]
    assert route.routing.deployments == () and not route.routing.hedge.is_enabled
    assert route.routing.ttft_timeout_s is None and route.routing.is_affinity_enabled


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"deployments": []}, "models.gpt.deployments: needs at least one"),
        (
            {"upstream": "east", "deployments": [{"upstream": "west"}]},
            "models.gpt: set 'deployments' or 'upstream'/'fallbacks', not both",
        ),
        ({"deployments": ["east"]}, "models.gpt.deployments[0]: expected a table"),
        ({"deployments": [{"weight": 1}]}, "models.gpt.deployments[0]: missing required key"),
        (
            {"deployments": [{"upstream": "north"}]},
            "models.gpt.deployments[0].upstream: unknown upstream 'north'",
        ),
        (
            {"deployments": [{"upstream": "east"}, {"upstream": "east"}]},
            "models.gpt.deployments[1].upstream: 'east' is listed twice",
        ),
        (
            {"deployments": [{"upstream": "east", "weight": 0}]},
            "models.gpt.deployments[0].weight: must be > 0",
        ),
        (
            {"deployments": [{"upstream": "east", "colour": "red"}]},
            "models.gpt.deployments[0].colour: unknown key (known: max_concurrency, priority",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"quantile": 1.5}}},
            "models.gpt.routing.hedge.quantile: must be > 0 and < 1",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"max_hedges": 3}}},
            "models.gpt.routing.hedge.max_hedges: must be 1 or 2, got 3",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"max_hedges": 0}}},
            "models.gpt.routing.hedge.max_hedges: must be >= 1",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"second_quantile": 1.0}}},
            "models.gpt.routing.hedge.second_quantile: must be > 0 and < 1",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"budget_burst": -1}}},
            "models.gpt.routing.hedge.budget_burst: must be >= 0",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"budget": 0}}},
            "models.gpt.routing.hedge.budget: must be > 0",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"min_delay_ms": 900, "max_delay_ms": 100}}},
            "models.gpt.routing.hedge.min_delay_ms: must not exceed max_delay_ms",
        ),
        (
            {"upstream": "east", "routing": {"ttft_timeout_s": 0}},
            "models.gpt.routing.ttft_timeout_s: must be > 0",
        ),
        (
            {"upstream": "east", "routing": {"affinity_load_factor": 0.5}},
            "models.gpt.routing.affinity_load_factor: must be >= 1",
        ),
        (
            {"upstream": "east", "routing": {"affinity_key_load_factor": 0.9}},
            "models.gpt.routing.affinity_key_load_factor: must be >= 1",
        ),
        (
            {"upstream": "east", "routing": {"breaker": {"consecutive_failures": 0}}},
            "models.gpt.routing.breaker.consecutive_failures: must be >= 1",
        ),
        (
            {"upstream": "east", "routing": {"hedge": {"enabled": "yes"}}},
            "models.gpt.routing.hedge.enabled: expected true or false",
        ),
        (
            {"upstream": "east", "routing": {"hedging": True}},
            "models.gpt.routing.hedging: unknown key (known: affinity, ",
        ),
    ],
)
def test_bad_values_name_their_key(model: dict[str, Any], message: str) -> None:
    assert message in _error(model)

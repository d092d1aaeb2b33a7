"""Unit tests for hasten.routing.models.ModelRouter: aliases, routes, wildcard, fallbacks, cache."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hasten.config import CacheConfig, GatewayConfig, parse_config
from hasten.config.cache_policy import ModelCachePolicy
from hasten.errors import ModelNotFound
from hasten.routing.models import ModelRouter, route_deployments


def _config(data: dict[str, Any]) -> GatewayConfig:
    base: dict[str, Any] = {
        "upstreams": {
            "a": {"url": "http://a.local/v1"},
            "b": {"url": "http://b.local/v1"},
            "c": {"url": "http://c.local/v1"},
        }
    }
    base.update(data)
    return parse_config(base, {})


@pytest.fixture
def router() -> ModelRouter:
    return ModelRouter(
        _config(
            {
                "cache": {"ttl_s": 100, "deterministic_only": True},
                "models": {
                    "gpt": {"upstream": "a", "fallbacks": ["c", "b"]},
                    "renamed": {"upstream": "b", "upstream_model": "real-name"},
                    "cached": {
                        "upstream": "c",
                        "cache": {"ttl_s": 5, "deterministic_only": False},
                    },
                    "uncached": {"upstream": "a", "cache": {"enabled": False}},
                },
                "aliases": {"fast": "gpt", "other": "renamed"},
            }
        )
    )


def _names(resolved_targets: tuple[Any, ...]) -> list[str]:
    return [t.name for t in resolved_targets]


def test_explicit_route_with_fallbacks_in_order(router: ModelRouter) -> None:
    resolved = router.resolve("gpt")
    assert resolved.name == "gpt"
    assert resolved.upstream_model == "gpt"
    assert not resolved.is_renamed
    assert _names(resolved.targets) == ["a", "c", "b"]
    assert [t.url for t in resolved.targets] == [
        "http://a.local/v1",
        "http://c.local/v1",
        "http://b.local/v1",
    ]


def test_route_without_fallbacks(router: ModelRouter) -> None:
    assert _names(router.resolve("renamed").targets) == ["b"]


def test_upstream_model_rename(router: ModelRouter) -> None:
    resolved = router.resolve("renamed")
    assert resolved.name == "renamed"
    assert resolved.upstream_model == "real-name"
    assert resolved.is_renamed


def test_alias_resolves_to_target(router: ModelRouter) -> None:
    resolved = router.resolve("fast")
    assert resolved.name == "gpt"
    assert resolved.upstream_model == "gpt"
    assert _names(resolved.targets) == ["a", "c", "b"]
    other = router.resolve("other")
    assert other.name == "renamed"
    assert other.upstream_model == "real-name"


def test_unknown_model_without_wildcard(router: ModelRouter) -> None:
    assert not router.has_wildcard
    assert router.wildcard_targets() == ()
    with pytest.raises(ModelNotFound) as info:
        router.resolve("gpt-5-imaginary")
    assert info.value.param == "model"
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert "gpt-5-imaginary" in info.value.message


def test_unknown_model_error_repeats(router: ModelRouter) -> None:
    for _ in range(3):
        with pytest.raises(ModelNotFound):
            router.resolve("nope")


def test_lookup_is_case_sensitive(router: ModelRouter) -> None:
    with pytest.raises(ModelNotFound):
        router.resolve("GPT")


def test_wildcard_catches_unknown_names() -> None:
    router = ModelRouter(
        _config(
            {
                "models": {
                    "gpt": {"upstream": "a"},
                    "*": {"upstream": "b", "fallbacks": ["c"]},
                },
                "aliases": {"fast": "some-model"},
            }
        )
    )
    assert router.has_wildcard
    anything = router.resolve("llama-3-70b")
    assert anything.name == "llama-3-70b"
    assert anything.upstream_model == "llama-3-70b"
    assert _names(anything.targets) == ["b", "c"]
    assert _names(router.wildcard_targets()) == ["b", "c"]
    # Explicit routes beat the wildcard.
    assert _names(router.resolve("gpt").targets) == ["a"]
    # An alias may point at a name only the wildcard knows.
    aliased = router.resolve("fast")
    assert aliased.name == "some-model"
    assert aliased.upstream_model == "some-model"
    assert _names(aliased.targets) == ["b", "c"]


def test_default_cache_policy_from_cache_table(router: ModelRouter) -> None:
    assert router.resolve("gpt").cache == ModelCachePolicy(
        is_enabled=True, is_deterministic_only=True, ttl_s=100.0
    )


def test_per_model_cache_policy(router: ModelRouter) -> None:
    assert router.resolve("cached").cache == ModelCachePolicy(
        is_enabled=True, is_deterministic_only=False, ttl_s=5.0
    )
    uncached = router.resolve("uncached").cache
    assert uncached.is_enabled is False
    assert uncached.ttl_s == 100.0  # unset keys inherit from [cache]


def test_default_cache_policy_follows_disabled_cache() -> None:
    config = _config({"cache": {"enabled": False}, "models": {"*": {"upstream": "a"}}})
    assert config.cache == CacheConfig(is_enabled=False)
    assert ModelRouter(config).resolve("x").cache.is_enabled is False


def test_resolution_is_stable(router: ModelRouter) -> None:
    assert router.resolve("gpt") == router.resolve("gpt")
    assert router.resolve("fast") == router.resolve("gpt")


def test_listed_models(router: ModelRouter) -> None:
    assert sorted(router.listed_models()) == sorted(
        ["gpt", "renamed", "cached", "uncached", "fast", "other"]
    )


def test_listed_models_excludes_wildcard() -> None:
    router = ModelRouter(_config({"models": {"*": {"upstream": "a"}, "m": {"upstream": "b"}}}))
    assert router.listed_models() == ["m"]


def test_empty_config_routes_nothing() -> None:
    router = ModelRouter(GatewayConfig())
    assert router.listed_models() == []
    with pytest.raises(ModelNotFound):
        router.resolve("anything")


def test_every_name_of_a_route_shares_its_one_route(router: ModelRouter) -> None:
    gpt, fast = router.resolve("gpt"), router.resolve("fast")
    assert gpt.route is fast.route  # built once at startup, not per name or per request
    assert gpt.route.name == "gpt"
    assert [d.upstream for d in gpt.route.deployments] == ["a", "c", "b"]
    assert [d.priority for d in gpt.route.deployments] == [0, 1, 2]
    assert sorted(gpt.route.upstreams) == ["a", "b", "c"]
    assert sorted(router.resolve("renamed").route.upstreams) == ["b"]  # only its own


def test_wildcard_names_share_the_wildcard_route() -> None:
    router = ModelRouter(_config({"models": {"*": {"upstream": "b"}, "m": {"upstream": "a"}}}))
    one, other = router.resolve("llama"), router.resolve("mistral")
    assert one.route is other.route and one.route.name == "*"
    assert (one.name, other.name) == ("llama", "mistral")  # the cache still tells them apart
    assert router.resolve("m").route.name == "m"


def test_configured_deployments_are_the_routes_deployments() -> None:
    deployments = [{"upstream": "b", "weight": 2}, {"upstream": "a", "priority": 1}]
    config = _config({"models": {"m": {"deployments": deployments}}})
    route = ModelRouter(config).resolve("m").route
    assert route.deployments == route_deployments(config.models["m"])
    assert route.deployments == config.models["m"].routing.deployments
    assert [(d.upstream, d.weight) for d in route.deployments] == [("b", 2.0), ("a", 1.0)]


@pytest.mark.parametrize("is_off", ["stream_upstream", "stream_options"])
def test_a_route_streams_non_stream_requests_only_if_every_upstream_can(is_off: str) -> None:
    """An upstream that takes no ``stream_options`` would leave the assembled body without
    usage, so it keeps its route's non-stream requests whole too."""
    config = _config({"models": {"m": {"upstream": "a", "fallbacks": ["b"]}}})
    assert ModelRouter(config).resolve("m").route.is_stream_upstream
    upstream = config.upstreams["b"]
    if is_off == "stream_upstream":
        changed = replace(upstream, is_stream_upstream=False)
    else:
        changed = replace(upstream, has_stream_options=False)
    config = replace(config, upstreams={**config.upstreams, "b": changed})
    assert not ModelRouter(config).resolve("m").route.is_stream_upstream


def test_a_route_takes_stream_options_only_if_every_upstream_does() -> None:
    config = _config({"models": {"m": {"upstream": "a", "fallbacks": ["b"]}}})
    no_options = replace(config.upstreams["b"], has_stream_options=False)
    config = replace(config, upstreams={**config.upstreams, "b": no_options})
    assert not ModelRouter(config).resolve("m").has_stream_options
    assert (
        ModelRouter(_config({"models": {"m": {"upstream": "a"}}})).resolve("m").has_stream_options
    )

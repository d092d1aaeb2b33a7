"""hasten in front of its simulator on loopback, as the real-client tests run it: the
simulator speaking chat only (hasten translates) or every API (hasten passes through)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from hasten.config import CacheConfig, GatewayConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.config.tables import CLIENT_APIS
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread

PATHS = ("translated", "native")


def gateway_config(
    sim_url: str, path: str, *, is_any_sampling: bool = False, is_stream_upstream: bool = True
) -> GatewayConfig:
    """A gateway whose one upstream is the simulator at ``sim_url`` (its origin); with
    ``is_any_sampling`` every model caches whatever the sampling fields say
    (``[models.X] cache = { deterministic_only = false }``), as a Messages or agent user
    sets it, since those clients send no temperature."""
    apis = CLIENT_APIS if path == "native" else ()
    config = make_config(
        {"sim": sim_url + "/v1"},
        cache=CacheConfig(backend="memory"),
        apis=apis,
        is_stream_upstream=is_stream_upstream,
    )
    if not is_any_sampling:
        return config
    policy = ModelCachePolicy(is_deterministic_only=False)
    routes = {name: replace(route, cache=policy) for name, route in config.models.items()}
    return replace(config, models=routes)


@contextmanager
def gateway_on(
    sim_url: str, path: str, *, is_any_sampling: bool = False, is_stream_upstream: bool = True
) -> Iterator[ServerThread]:
    config = gateway_config(
        sim_url, path, is_any_sampling=is_any_sampling, is_stream_upstream=is_stream_upstream
    )
    with running_gateway(config) as server:
        yield server

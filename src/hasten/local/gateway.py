"""The local edge model behind the gateway.

llama.cpp's own server runs in a supervised child process (``hasten.local.supervisor``)
behind a loopback listener and is registered as upstream ``local``, so it gets the same
cache, coalescing, routing, breaker and failover as any cloud upstream. Hybrid routing
becomes two ordinary routes per hybrid model name: ``<model>@local`` (local first, cloud as
fallback) and ``<model>@cloud`` (cloud first with a first-token timeout, local as
fallback); ``hasten.routing.hybrid`` picks one per request.
"""

from __future__ import annotations

from dataclasses import replace

from hasten.config import (
    WILDCARD_MODEL,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    TimeoutConfig,
    UpstreamConfig,
)
from hasten.config.hybrid import HybridConfig
from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.routing.hybrid import Target, route_name
from hasten.routing.models import route_deployments

LOCAL = "local"
# Retrying a local failure in the gateway would only add load to a saturated CPU, so the
# router fails over instead.
LOCAL_RETRY = RetryConfig(max_retries=0)
# llama-server answers these itself, so they pass through untranslated. Not embeddings (its
# --embeddings mode serves nothing else) and not Responses (its stream is not one hasten
# reads as a Responses stream yet): those are translated to chat.
LOCAL_APIS = ("chat", "completions", "messages")
LOCAL_TIMEOUTS = TimeoutConfig(connect_s=2.0, first_byte_s=120.0, idle_s=60.0, total_s=600.0)


def is_local_available() -> bool:
    """True when llama-server and a GGUF model can be found without starting anything."""
    from hasten.config.local import default_model_path
    from hasten.errors import EngineNotBuilt, ModelFileNotFound
    from hasten.local.command import find_binary

    try:
        return find_binary().is_file() and default_model_path().is_file()
    except (EngineNotBuilt, ModelFileNotFound):
        return False


def with_local_upstream(
    config: GatewayConfig, url: str, *, has_tools: bool = False, max_in_flight: int = 0
) -> GatewayConfig:
    """Adds upstream and model ``local`` (and the hybrid routes) for an engine at ``url``;
    ``has_tools`` when its model's chat template takes tools (the supervisor asks);
    ``max_in_flight``: ``[local]`` max_seqs + max_queue (llama-server never refuses)."""
    upstream = UpstreamConfig(
        name=LOCAL,
        url=url,
        timeouts=LOCAL_TIMEOUTS,
        retry=LOCAL_RETRY,
        max_in_flight=max_in_flight,
        apis=LOCAL_APIS,
        has_tools=has_tools,
    )
    models = dict(config.models)
    models.setdefault(LOCAL, ModelRoute(name=LOCAL, upstream=LOCAL))
    if not config.upstreams:
        # The embedded default: with no cloud configured, every model name is answered locally.
        models[WILDCARD_MODEL] = ModelRoute(name=WILDCARD_MODEL, upstream=LOCAL)
    return replace(config, upstreams={**config.upstreams, LOCAL: upstream}, models=models)


def with_hybrid_routes(config: GatewayConfig) -> GatewayConfig:
    """Adds ``<model>@local`` and ``<model>@cloud`` for a ``[hybrid]`` section, if any.

    Routes added before are derived again from the rest, so this can be applied to its own
    output, also after the local upstream was added in between.
    """
    hybrid = config.hybrid
    if hybrid is None:
        return config
    derived = {route_name(hybrid.model, "local"), route_name(hybrid.model, "cloud")}
    models = {name: route for name, route in config.models.items() if name not in derived}
    config = replace(config, models=models)
    return replace(config, models={**models, **hybrid_routes(config, hybrid)})


def hybrid_routes(config: GatewayConfig, hybrid: HybridConfig) -> dict[str, ModelRoute]:
    """The two routes behind one hybrid model name."""
    cloud = config.models.get(hybrid.cloud_model) or config.models.get(WILDCARD_MODEL)
    cloud_deployments = route_deployments(cloud) if cloud is not None else ()
    # Without a running engine (policy cloud-only) the routes simply have no local tier.
    local = (DeploymentConfig(upstream=LOCAL),) if LOCAL in config.upstreams else ()
    # A slow cloud first token fails over to the local model (cloud-first's promise).
    timed_cloud = tuple(
        replace(d, ttft_timeout_s=d.ttft_timeout_s or hybrid.cloud_first_token_timeout_s)
        for d in cloud_deployments
    )
    orders: dict[Target, tuple[DeploymentConfig, ...]] = {
        "local": _tiers(local, () if hybrid.policy == "local-only" else cloud_deployments),
        "cloud": _tiers(timed_cloud, () if hybrid.policy == "cloud-only" else local),
    }
    upstream_model = LOCAL
    if cloud is not None and hybrid.policy != "local-only":
        upstream_model = cloud.upstream_model or hybrid.cloud_model
    routes = {}
    for target, deployments in orders.items():
        if not deployments:
            continue
        name = route_name(hybrid.model, target)
        routes[name] = ModelRoute(
            name=name,
            upstream=deployments[0].upstream,
            fallbacks=tuple(d.upstream for d in deployments[1:]),
            upstream_model=upstream_model,
            cache=cloud.cache if cloud is not None else None,
            policy=cloud.policy if cloud is not None else None,
            routing=replace(cloud.routing if cloud else RoutingConfig(), deployments=deployments),
        )
    return routes


def _tiers(
    first: tuple[DeploymentConfig, ...], then: tuple[DeploymentConfig, ...]
) -> tuple[DeploymentConfig, ...]:
    """``first`` keeps its priorities; ``then`` goes strictly after all of them."""
    if not first:
        return then
    offset = max(d.priority for d in first) + 1
    return first + tuple(replace(d, priority=d.priority + offset) for d in then)

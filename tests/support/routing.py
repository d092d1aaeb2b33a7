"""A deployment pool for pure routing tests, taught by hand in virtual time."""

from __future__ import annotations

import random

from hasten.config.routing import BreakerConfig, DeploymentConfig, RoutingConfig
from hasten.routing.pool import DeploymentPool

BREAKER = BreakerConfig(max_consecutive_failures=3, min_requests=10, window_size=20, cooldown_s=1.0)


def make_pool(
    names: tuple[str, ...] = ("a", "b", "c"),
    *,
    routing: RoutingConfig | None = None,
    seed: int = 1,
    **deployment_fields: dict[str, object],
) -> DeploymentPool:
    """A pool of one deployment per name; ``a={"weight": 8.0}`` sets that one's fields."""
    deployments = [DeploymentConfig(upstream=n, **deployment_fields.get(n, {})) for n in names]  # type: ignore[arg-type]
    return DeploymentPool(deployments, routing or RoutingConfig(), random.Random(seed))


def teach(pool: DeploymentPool, name: str, ttft_ms: float, num: int, start_s: float) -> float:
    """Feeds ``num`` attempts of ``ttft_ms`` to ``name``, 50 ms apart; returns the last time."""
    now_s = start_s
    for _ in range(num):
        now_s += 0.05
        is_probe = pool.on_attempt_start(name, now_s)
        pool.on_first_token(name, ttft_ms, now_s, is_probe=is_probe)
        pool.on_attempt_end(name)
    return now_s

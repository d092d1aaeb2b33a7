"""``GET /dashboard/data``: one JSON snapshot of the window and of the gateway's state.

Nothing here is counted twice: the windowed numbers come from the rolling window, the
totals since start from the same per-request records the Prometheus ``Metrics`` counts
(the seam, ``hasten.values.outcome``), and the live state from the objects ``/metrics``
and ``/admin/*`` read themselves: the routing pools' snapshots
(``UpstreamClient.routing_state``), the cache tiers' stats (``Pipeline.cache_stats``) and
the local engine's status. So a dashboard and a scrape taken at the same moment agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from hasten.dashboard.window import RollingWindow

if TYPE_CHECKING:
    from hasten.metrics.registry import EngineScrape
    from hasten.proxy.pipeline import Pipeline


class EngineStatus(Protocol):
    """The local engine child's supervisor, as ``/readyz`` and the dashboard see it."""

    def status(self) -> dict[str, object]: ...


# The rows of the hit-ratio table, in the order a request can be answered.
TIERS = (
    ("hit", "exact cache"),
    ("semantic", "semantic cache"),
    ("coalesced", "coalesced"),
    ("miss", "miss (upstream)"),
    ("bypass", "bypass (upstream)"),
)


def build_snapshot(
    pipeline: Pipeline,
    window: RollingWindow,
    engine: EngineStatus | None,
    rate: TokenRate,
    *,
    now_s: float,
    wall_s: float,
    scrape: EngineScrape | None = None,
) -> dict[str, Any]:
    """Everything the page shows, JSON-ready; ``now_s`` monotonic, ``wall_s`` epoch;
    ``scrape``: the metrics' last look at the engine child, when the metrics are on."""
    routing = pipeline.client.routing_state()
    lifetime = window.lifetime
    num_requests = sum(lifetime.by_cache.values())
    num_hits = lifetime.by_cache["hit"] + lifetime.by_cache["semantic"]
    deployments = _deployments(routing)
    return {
        "generated_at_ms": round(wall_s * 1000.0),
        "rate_span_s": window.config.rate_span_s,
        "window": window.snapshot(now_s),
        "totals": {
            "requests": num_requests,
            "by_cache": dict(lifetime.by_cache),
            "hit_ratio": round(num_hits / num_requests, 4) if num_requests else None,
            "latency_saved_s": round(lifetime.saved_s, 3),
            "in_flight": sum(d["in_flight"] for d in deployments),
            "flights": len(pipeline.coalescer),
            "hedges": sum(_int(pool.get("hedges")) for pool in _pools(routing)),
        },
        "tiers": _tiers(lifetime.by_cache, num_requests),
        "cache": pipeline.cache_stats(),
        "deployments": deployments,
        "engine": _engine(scrape, engine, rate, now_s),
    }


class TokenRate:
    """Tokens per second of the engine child, from its decoded-token counter's growth
    between two snapshots (the counter restarts with the child: a drop starts over)."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self.tokens_per_s: float | None = None

    def update(self, num_decoded_tokens: int, now_s: float) -> float | None:
        last, self._last = self._last, (now_s, num_decoded_tokens)
        if last is not None and now_s > last[0] and num_decoded_tokens >= last[1]:
            self.tokens_per_s = (num_decoded_tokens - last[1]) / (now_s - last[0])
        return self.tokens_per_s


def _engine(
    scrape: EngineScrape | None, engine: EngineStatus | None, rate: TokenRate, now_s: float
) -> dict[str, object] | None:
    """The supervisor's status, and the child's queue and speed as the last scrape saw them
    (``hasten.metrics.endpoint.Scrape.sample_engine``, which the route runs first)."""
    if engine is None:
        return None
    status = engine.status()
    view: dict[str, object] = {"state": status.get("state"), "restarts": status.get("restarts")}
    sample = scrape.engine if scrape is not None else None
    if sample is not None:
        for key in ("num_waiting", "num_running"):
            if isinstance(sample.stats.get(key), int):
                view[key.removeprefix("num_")] = sample.stats[key]
        decoded = sample.stats.get("num_decoded_tokens")
        if isinstance(decoded, int):
            tokens_per_s = rate.update(decoded, now_s)
            view["tokens_per_s"] = None if tokens_per_s is None else round(tokens_per_s, 1)
    return view


def _tiers(by_cache: dict[str, int], num_requests: int) -> list[dict[str, Any]]:
    return [
        {
            "tier": label,
            "cache": name,
            "requests": by_cache.get(name, 0),
            "ratio": round(by_cache.get(name, 0) / num_requests, 4) if num_requests else None,
        }
        for name, label in TIERS
    ]


def _pools(routing: dict[str, object]) -> list[dict[str, Any]]:
    return [pool for pool in routing.values() if isinstance(pool, dict)]


def _deployments(routing: dict[str, object]) -> list[dict[str, Any]]:
    """One row per (model, deployment), from ``DeploymentPool.snapshot``."""
    rows = []
    for model, pool in sorted(routing.items()):
        if not isinstance(pool, dict):
            continue
        delays = pool.get("hedge_delay_ms") or {}
        for name, state in sorted(pool.get("deployments", {}).items()):
            breaker = state.get("breaker") or {}
            rows.append(
                {
                    "model": model,
                    "deployment": name,
                    "ttft_ms": state.get("ttft_ms"),
                    "ttft_p95_ms": state.get("ttft_p95_ms"),
                    "in_flight": _int(state.get("in_flight")),
                    "breaker": breaker.get("state", "closed"),
                    "hedging": bool(pool.get("hedging")),
                    "hedge_delay_ms": delays.get(name),
                    "wins": _int(state.get("wins")),
                    "failures": _int(state.get("failures")),
                }
            )
    return rows


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0

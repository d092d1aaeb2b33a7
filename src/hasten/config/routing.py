"""Routing settings of one model: its deployments, hedging, breakers and prefix affinity.

Frozen dataclasses with named defaults, plus their TOML readers. ``hasten.config`` calls the
readers with its own table type (anything shaped like ``TomlTable``), which keeps this module
free of an import cycle and gives every bad value a message naming its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Only a type here: hasten.config imports this module to read the routing tables.
    from hasten.config.reader import TomlTable

DEFAULT_HEDGE_QUANTILE = 0.95
DEFAULT_HEDGE_BUDGET = 0.05
# A token bucket of this many hedges by default: a sliding window alone has no room at a
# cold start, when a deployment degrades, or for low-rate sequential traffic (one agent sends
# ~70 requests a route per 30 s window: the window refused half its late requests and the
# p99 was an unrescued straggler, docs/benchmarks.md "Agents"); the hard cap still holds
# hedges since the start to max(burst, budget x requests).
DEFAULT_HEDGE_BUDGET_BURST = 20.0
# Two hedges: the second fires when the first hedge is late too. One keeps the old behaviour.
DEFAULT_MAX_HEDGES = 2
MAX_HEDGES_LIMIT = 2


@dataclass(frozen=True)
class DeploymentConfig:
    """One upstream serving a model: lower ``priority`` is tried first, ``weight`` within a tier."""

    upstream: str
    weight: float = 1.0
    priority: int = 0
    max_concurrency: int = 0  # 0: unlimited
    ttft_timeout_s: float | None = None  # None: the model's routing.ttft_timeout_s
    is_prompt_cache_key: bool = False  # set OpenAI's prompt_cache_key from the affinity key


@dataclass(frozen=True)
class HedgeConfig:
    """More requests when the first token is late: a first hedge after a delay that adapts
    to the fleet's TTFT, and a second when the first hedge is late too."""

    is_enabled: bool = False
    quantile: float = DEFAULT_HEDGE_QUANTILE
    max_hedges: int = DEFAULT_MAX_HEDGES  # 1: the first hedge only
    # The second hedge waits this pooled TTFT quantile after the first; None: the first's
    # (the budget's p96), so the first hedge is hedged by the rule that hedged the primary.
    second_quantile: float | None = None
    min_delay_ms: float = 50.0
    max_delay_ms: float = 2000.0
    min_samples: int = 10  # below this many TTFT samples the delay is max_delay_ms
    budget: float = DEFAULT_HEDGE_BUDGET  # extra requests as a share of requests
    budget_window_s: float = 30.0
    # > 0: a token bucket saving up to this many hedges, and hedges since the start capped at
    # max(burst, budget x requests) (budget.py)
    budget_burst: float = DEFAULT_HEDGE_BUDGET_BURST  # 0: the sliding window alone


@dataclass(frozen=True)
class BreakerConfig:
    max_consecutive_failures: int = 5
    error_rate: float = 0.5  # trips when this share of the window failed...
    min_requests: int = 20  # ...and the window holds at least this many outcomes
    window_size: int = 50
    cooldown_s: float = 5.0
    max_cooldown_s: float = 60.0
    num_half_open_probes: int = 1


@dataclass(frozen=True)
class RoutingConfig:
    ttft_timeout_s: float | None = None
    hedge: HedgeConfig = HedgeConfig()
    breaker: BreakerConfig = BreakerConfig()
    is_affinity_enabled: bool = True
    affinity_min_prefix_chars: int = 1024
    affinity_max_prefix_chars: int = 32_768
    # Spill a key's request off its home when the home holds this many times the average
    # in-flight load. LLM servers batch, so a few more requests in flight cost little, while
    # a spilled request re-reads its whole prefix and evicts someone else's: 2, not 1.25.
    affinity_load_factor: float = 2.0
    affinity_key_load_factor: float = 1.0  # homes differ by at most ceil(this x fair share)
    affinity_max_keys: int = 100_000  # the home table forgets least recently used keys
    ewma_decay_s: float = 10.0
    penalty_decay_s: float = 5.0
    # A deployment without recent samples drifts back towards the fleet's best estimate with
    # this time constant, so an avoided one is retried now and then and a recovery is seen.
    explore_decay_s: float = 30.0
    probe_interval_s: float = 0.0  # 0: no active round-trip probes
    deployments: tuple[DeploymentConfig, ...] = field(default=())


def _fraction(table: TomlTable, key: str, default: float, *, is_open: bool = False) -> float:
    value = table.number(key, default)
    upper_ok = value < 1.0 if is_open else value <= 1.0
    if not (value > 0.0 and upper_ok):
        bound = "< 1" if is_open else "<= 1"
        raise table.error(key, f"must be > 0 and {bound}, got {value:g}")
    return value


def _non_negative(table: TomlTable, key: str, default: float) -> float:
    value = float(table.get(key, (int, float), default))
    if value < 0:
        raise table.error(key, f"must be >= 0, got {value:g}")
    return value


def _optional_seconds(table: TomlTable, key: str) -> float | None:
    if key not in table.data:
        table.get(key, (int, float), None)
        return None
    return table.number(key, 1.0)


def parse_deployment(table: TomlTable, upstreams: Any) -> DeploymentConfig:
    upstream = table.get("upstream", str, None)
    if upstream is None:
        raise table.error(None, "missing required key 'upstream'")
    if upstream not in upstreams:
        known = ", ".join(sorted(upstreams)) or "none"
        raise table.error("upstream", f"unknown upstream {upstream!r} (known: {known})")
    weight = table.number("weight", 1.0)
    if weight <= 0:
        raise table.error("weight", f"must be > 0, got {weight:g}")
    config = DeploymentConfig(
        upstream=upstream,
        weight=weight,
        priority=table.integer("priority", 0),
        max_concurrency=table.integer("max_concurrency", 0),
        ttft_timeout_s=_optional_seconds(table, "ttft_timeout_s"),
        is_prompt_cache_key=table.get("prompt_cache_key", bool, False),
    )
    table.finish()
    return config


def _hedge(table: TomlTable) -> HedgeConfig:
    d = HedgeConfig()
    config = HedgeConfig(
        is_enabled=table.get("enabled", bool, d.is_enabled),
        quantile=_fraction(table, "quantile", d.quantile, is_open=True),
        max_hedges=table.integer("max_hedges", d.max_hedges, minimum=1),
        second_quantile=(
            _fraction(table, "second_quantile", 0.5, is_open=True)
            if "second_quantile" in table.data
            else None
        ),
        min_delay_ms=table.number("min_delay_ms", d.min_delay_ms),
        max_delay_ms=table.number("max_delay_ms", d.max_delay_ms),
        min_samples=table.integer("min_samples", d.min_samples),
        budget=_fraction(table, "budget", d.budget),
        budget_window_s=table.number("budget_window_s", d.budget_window_s),
        budget_burst=_non_negative(table, "budget_burst", d.budget_burst),
    )
    if config.max_hedges > MAX_HEDGES_LIMIT:
        raise table.error("max_hedges", f"must be 1 or 2, got {config.max_hedges}")
    if config.min_delay_ms > config.max_delay_ms:
        raise table.error(
            "min_delay_ms",
            f"must not exceed max_delay_ms ({config.min_delay_ms:g} > {config.max_delay_ms:g})",
        )
    table.finish()
    return config


def _breaker(table: TomlTable) -> BreakerConfig:
    d = BreakerConfig()
    config = BreakerConfig(
        max_consecutive_failures=table.integer(
            "consecutive_failures", d.max_consecutive_failures, minimum=1
        ),
        error_rate=_fraction(table, "error_rate", d.error_rate),
        min_requests=table.integer("min_requests", d.min_requests, minimum=1),
        window_size=table.integer("window_size", d.window_size, minimum=1),
        cooldown_s=table.number("cooldown_s", d.cooldown_s),
        max_cooldown_s=table.number("max_cooldown_s", d.max_cooldown_s),
        num_half_open_probes=table.integer("half_open_probes", d.num_half_open_probes, minimum=1),
    )
    if config.cooldown_s > config.max_cooldown_s:
        raise table.error("cooldown_s", "must not exceed max_cooldown_s")
    if config.min_requests > config.window_size:
        raise table.error("min_requests", "must not exceed window_size")
    table.finish()
    return config


def parse_routing(table: TomlTable, deployments: tuple[DeploymentConfig, ...]) -> RoutingConfig:
    """Reads ``[models."<name>".routing]`` (with optional ``.hedge`` and ``.breaker`` tables)."""
    d = RoutingConfig()
    config = RoutingConfig(
        ttft_timeout_s=_optional_seconds(table, "ttft_timeout_s"),
        hedge=_hedge(table.table("hedge")),
        breaker=_breaker(table.table("breaker")),
        is_affinity_enabled=table.get("affinity", bool, d.is_affinity_enabled),
        affinity_min_prefix_chars=table.integer(
            "affinity_min_prefix_chars", d.affinity_min_prefix_chars, minimum=1
        ),
        affinity_max_prefix_chars=table.integer(
            "affinity_max_prefix_chars", d.affinity_max_prefix_chars, minimum=1
        ),
        affinity_load_factor=table.number("affinity_load_factor", d.affinity_load_factor),
        affinity_key_load_factor=table.number(
            "affinity_key_load_factor", d.affinity_key_load_factor
        ),
        affinity_max_keys=table.integer("affinity_max_keys", d.affinity_max_keys, minimum=1),
        ewma_decay_s=table.number("ewma_decay_s", d.ewma_decay_s),
        penalty_decay_s=table.number("penalty_decay_s", d.penalty_decay_s),
        explore_decay_s=table.number("explore_decay_s", d.explore_decay_s),
        probe_interval_s=_non_negative(table, "probe_interval_s", d.probe_interval_s),
        deployments=deployments,
    )
    if config.affinity_load_factor < 1.0:
        raise table.error(
            "affinity_load_factor", f"must be >= 1, got {config.affinity_load_factor:g}"
        )
    if config.affinity_key_load_factor < 1.0:
        raise table.error(
            "affinity_key_load_factor", f"must be >= 1, got {config.affinity_key_load_factor:g}"
        )
    if config.affinity_min_prefix_chars > config.affinity_max_prefix_chars:
        raise table.error("affinity_min_prefix_chars", "must not exceed affinity_max_prefix_chars")
    table.finish()
    return config

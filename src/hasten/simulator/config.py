"""The simulator's settings: one frozen dataclass, validated, loadable from a mapping or TOML.

Every latency and fault knob defaults to zero so that, out of the box, the simulator answers
as fast as it can and a benchmark through it measures only the caller's own overhead.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasten.errors import ConfigError

DEFAULT_MODEL = "sim-model"
DEFAULT_OUTPUT_TOKENS = 16
DEFAULT_EMBEDDING_DIMS = 64
DEFAULT_PREFIX_BLOCK_TOKENS = 16
DEFAULT_PREFIX_CACHE_BLOCKS = 65_536
DEFAULT_STRAGGLER_MULT = 10.0
DEFAULT_RETRY_AFTER_S = 1.0

_PROBABILITY_FIELDS = ("straggler_prob", "error_rate", "rate_limit_rate", "disconnect_rate")
_NON_NEGATIVE_FIELDS = (
    "rtt_ms",
    "ttft_base_ms",
    "prefill_ms_per_token",
    "prefill_cached_ms_per_token",
    "decode_ms_per_token",
    "jitter_sigma",
    "retry_after_s",
)
_POSITIVE_INT_FIELDS = ("output_tokens", "embedding_dims", "prefix_block_tokens")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Latency model, fault injection and output shape of the simulated upstream."""

    models: tuple[str, ...] = (DEFAULT_MODEL,)
    # False: any model name is answered (other suites pick their own names); True: 404 otherwise.
    strict_models: bool = False
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    embedding_dims: int = DEFAULT_EMBEDDING_DIMS

    rtt_ms: float = 0.0
    ttft_base_ms: float = 0.0
    prefill_ms_per_token: float = 0.0
    prefill_cached_ms_per_token: float = 0.0
    decode_ms_per_token: float = 0.0
    jitter_sigma: float = 0.0
    straggler_prob: float = 0.0
    straggler_mult: float = DEFAULT_STRAGGLER_MULT

    prefix_block_tokens: int = DEFAULT_PREFIX_BLOCK_TOKENS
    prefix_cache_blocks: int = DEFAULT_PREFIX_CACHE_BLOCKS

    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    disconnect_rate: float = 0.0
    retry_after_s: float = DEFAULT_RETRY_AFTER_S

    seed: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def has_latency(self) -> bool:
        return (
            self.rtt_ms > 0
            or self.ttft_base_ms > 0
            or self.prefill_ms_per_token > 0
            or self.prefill_cached_ms_per_token > 0
            or self.decode_ms_per_token > 0
        )

    @property
    def has_faults(self) -> bool:
        return self.error_rate > 0 or self.rate_limit_rate > 0 or self.disconnect_rate > 0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["models"] = list(self.models)
        return data

    def updated(self, changes: Mapping[str, Any]) -> SimConfig:
        """A copy with `changes` applied; raises ConfigError on unknown fields or bad values."""
        return dataclasses.replace(self, **_coerce_fields(changes))


def _validate(config: SimConfig) -> None:
    if not config.models or not all(isinstance(m, str) and m for m in config.models):
        raise ConfigError("models must be a non-empty list of non-empty strings")
    for name in _NON_NEGATIVE_FIELDS:
        value = getattr(config, name)
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
    for name in _PROBABILITY_FIELDS:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ConfigError(f"{name} must be within [0, 1]")
    for name in _POSITIVE_INT_FIELDS:
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be >= 1")
    if config.prefix_cache_blocks < 0:
        raise ConfigError("prefix_cache_blocks must be >= 0 (0 disables the prefix cache)")
    if not math.isfinite(config.straggler_mult) or config.straggler_mult < 1.0:
        raise ConfigError("straggler_mult must be a finite number >= 1")
    if config.error_rate + config.rate_limit_rate + config.disconnect_rate > 1.0:
        raise ConfigError("error_rate + rate_limit_rate + disconnect_rate must be <= 1")
    if config.prefill_cached_ms_per_token > config.prefill_ms_per_token:
        raise ConfigError("prefill_cached_ms_per_token must not exceed prefill_ms_per_token")


_FIELD_TYPES: dict[str, type] = {
    f.name: type(f.default) for f in dataclasses.fields(SimConfig) if f.name != "models"
}


def _coerce_fields(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Checks names and JSON/TOML value types so bad input becomes a ConfigError, not a crash."""
    coerced: dict[str, Any] = {}
    for name, value in changes.items():
        if name == "models":
            coerced[name] = _coerce_models(value)
            continue
        expected = _FIELD_TYPES.get(name)
        if expected is None:
            raise ConfigError(f"unknown simulator setting {name!r}")
        # bool is an int subclass: refuse it for numbers, and numbers for bools.
        if isinstance(value, bool) != (expected is bool):
            raise ConfigError(f"{name} must be a {expected.__name__}, got {value!r}")
        if expected is float and isinstance(value, float):
            coerced[name] = value
        elif expected is float and isinstance(value, int):
            if abs(value) > 2**53:
                raise ConfigError(f"{name} is out of range: {value!r}")
            coerced[name] = float(value)
        elif expected is float or (expected is int and not isinstance(value, int)):
            raise ConfigError(f"{name} must be a {expected.__name__}, got {value!r}")
        else:
            coerced[name] = value
    return coerced


def _coerce_models(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ConfigError(f"models must be a string or a list of strings, got {value!r}")


def config_from_mapping(changes: Mapping[str, Any], base: SimConfig | None = None) -> SimConfig:
    """`base` (defaults if None) with `changes` applied."""
    return (base if base is not None else SimConfig()).updated(changes)


def load_toml_config(path: str | Path) -> SimConfig:
    """Reads the `[simulator]` table of a TOML file; a file without it yields the defaults."""
    try:
        with open(path, "rb") as fh:
            document = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read simulator config {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from exc
    table = document.get("simulator", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[simulator] in {path} must be a table")
    return config_from_mapping(table)

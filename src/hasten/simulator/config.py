"""The simulator's settings: one frozen dataclass, validated, loadable from a mapping or TOML.

Every latency and fault knob defaults to zero so that, out of the box, the simulator answers
as fast as it can and a benchmark through it measures only the caller's own overhead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasten.config.reader import TomlTable, read_toml_file
from hasten.errors import ConfigError

TABLE = "simulator"  # the table of a TOML file, and the path its errors name

DEFAULT_MODEL = "sim-model"
DEFAULT_OUTPUT_TOKENS = 16
# Parallel tool calls one answer makes at most (``simulator.inputs.MAX_TOOL_CALLS``).
DEFAULT_MAX_TOOL_CALLS = 8
DEFAULT_EMBEDDING_DIMS = 64
DEFAULT_PREFIX_BLOCK_TOKENS = 16
DEFAULT_PREFIX_CACHE_BLOCKS = 65_536
DEFAULT_STRAGGLER_MULT = 10.0
DEFAULT_RETRY_AFTER_S = 1.0
# Anthropic caches no prompt prefix shorter than this (1,024 tokens on most Claude models).
DEFAULT_MESSAGES_CACHE_MIN_TOKENS = 1024
# Stored Responses (previous_response_id, GET /v1/responses/{id}): at most this many bytes.
DEFAULT_RESPONSE_STORE_BYTES = 64 * 1024 * 1024
# How a request's latency (jitter, straggler) is drawn: "arrival", from one seeded stream in
# the order requests arrive; "trace", from the request's W3C trace id and how many times the
# same caller (trace id and parent span) has sent it. "trace" gives two systems sent the same
# traced requests the same draws (common random numbers: a direct call and a gateway's
# first attempt see the same straggler), while a gateway's hedge or retry, the same caller's
# second sending, draws afresh.
DRAW_BY_CHOICES = ("arrival", "trace")

_FAULT_RATE_FIELDS = (
    "error_rate",
    "rate_limit_rate",
    "disconnect_rate",
    "silent_rate",
    "hang_rate",
    "malformed_rate",
    "truncate_rate",
)
_PROBABILITY_FIELDS = ("straggler_prob", *_FAULT_RATE_FIELDS)
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
    # True: a chat or text completion with max_tokens runs to it (finish_reason "length");
    # False: max_tokens only caps output_tokens, as on the Responses and Messages APIs (an
    # agent's large limit, such as Claude Code's 32,000, translated to chat).
    runs_to_max_tokens: bool = True
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
    # The Messages API caches only up to cache_control breakpoints, and no prefix shorter
    # than this; the Responses API stores answers (store: true) within this many bytes.
    messages_cache_min_tokens: int = DEFAULT_MESSAGES_CACHE_MIN_TOKENS
    response_store_bytes: int = DEFAULT_RESPONSE_STORE_BYTES
    # Tool calls one answer makes at most, of those the request's tools and tool_choice ask
    # for: 1 calls the first tool only; 0 never calls one (every answer is text, as for an
    # agent run end to end whose tools' outputs differ per run).
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS

    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    disconnect_rate: float = 0.0
    silent_rate: float = 0.0  # reads the request and never answers
    hang_rate: float = 0.0  # 200 and headers, then nothing
    malformed_rate: float = 0.0  # a data line that is not JSON mid-stream
    truncate_rate: float = 0.0  # the body ends cleanly, cut mid-event or mid-JSON
    retry_after_s: float = DEFAULT_RETRY_AFTER_S

    seed: int = 0
    draw_by: str = "arrival"

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
        return any(getattr(self, name) > 0 for name in _FAULT_RATE_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["models"] = list(self.models)
        return data

    def updated(self, changes: Mapping[str, Any]) -> SimConfig:
        """A copy with `changes` applied; raises ConfigError on unknown fields or bad values."""
        return read_simulator(TomlTable(changes, TABLE), base=self)


def _validate(config: SimConfig) -> None:
    def error(name: str, problem: str) -> ConfigError:
        return ConfigError(f"{TABLE}.{name}: {problem}")

    if not config.models or not all(isinstance(m, str) and m for m in config.models):
        raise error("models", "must be a non-empty list of non-empty strings")
    for name in _NON_NEGATIVE_FIELDS:
        value = getattr(config, name)
        if not math.isfinite(value) or value < 0:
            raise error(name, f"must be a finite number >= 0, got {value!r}")
    for name in _PROBABILITY_FIELDS:
        if not 0.0 <= (value := getattr(config, name)) <= 1.0:
            raise error(name, f"must be within [0, 1], got {value!r}")
    for name in _POSITIVE_INT_FIELDS:
        if (value := getattr(config, name)) < 1:
            raise error(name, f"must be >= 1, got {value!r}")
    if config.prefix_cache_blocks < 0:
        raise error("prefix_cache_blocks", "must be >= 0 (0 disables the prefix cache)")
    if config.messages_cache_min_tokens < 0:
        raise error("messages_cache_min_tokens", "must be >= 0")
    if config.response_store_bytes < 0:
        raise error("response_store_bytes", "must be >= 0 (0 stores no response)")
    if config.max_tool_calls < 0:
        raise error("max_tool_calls", "must be >= 0 (0 never calls a tool)")
    if not math.isfinite(config.straggler_mult) or config.straggler_mult < 1.0:
        raise error(
            "straggler_mult", f"must be a finite number >= 1, got {config.straggler_mult!r}"
        )
    if sum(getattr(config, name) for name in _FAULT_RATE_FIELDS) > 1.0:
        raise error("error_rate", f"the fault rates ({', '.join(_FAULT_RATE_FIELDS)}) sum above 1")
    if config.prefill_cached_ms_per_token > config.prefill_ms_per_token:
        raise error("prefill_cached_ms_per_token", "must not exceed prefill_ms_per_token")
    if config.draw_by not in DRAW_BY_CHOICES:
        choices = ", ".join(DRAW_BY_CHOICES)
        raise error("draw_by", f"must be one of {choices}, got {config.draw_by!r}")


def read_simulator(table: TomlTable, base: SimConfig) -> SimConfig:
    """``base`` with the fields ``table`` gives (the TOML file, flags or ``/sim/config``)."""
    b = base
    config = SimConfig(
        models=_models(table, b.models),
        strict_models=table.boolean("strict_models", b.strict_models),
        output_tokens=int(table.get("output_tokens", int, b.output_tokens)),
        runs_to_max_tokens=table.boolean("runs_to_max_tokens", b.runs_to_max_tokens),
        embedding_dims=int(table.get("embedding_dims", int, b.embedding_dims)),
        rtt_ms=table.real("rtt_ms", b.rtt_ms),
        ttft_base_ms=table.real("ttft_base_ms", b.ttft_base_ms),
        prefill_ms_per_token=table.real("prefill_ms_per_token", b.prefill_ms_per_token),
        prefill_cached_ms_per_token=table.real(
            "prefill_cached_ms_per_token", b.prefill_cached_ms_per_token
        ),
        decode_ms_per_token=table.real("decode_ms_per_token", b.decode_ms_per_token),
        jitter_sigma=table.real("jitter_sigma", b.jitter_sigma),
        straggler_prob=table.real("straggler_prob", b.straggler_prob),
        straggler_mult=table.real("straggler_mult", b.straggler_mult),
        prefix_block_tokens=int(table.get("prefix_block_tokens", int, b.prefix_block_tokens)),
        prefix_cache_blocks=int(table.get("prefix_cache_blocks", int, b.prefix_cache_blocks)),
        messages_cache_min_tokens=int(
            table.get("messages_cache_min_tokens", int, b.messages_cache_min_tokens)
        ),
        response_store_bytes=int(table.get("response_store_bytes", int, b.response_store_bytes)),
        max_tool_calls=int(table.get("max_tool_calls", int, b.max_tool_calls)),
        error_rate=table.real("error_rate", b.error_rate),
        rate_limit_rate=table.real("rate_limit_rate", b.rate_limit_rate),
        disconnect_rate=table.real("disconnect_rate", b.disconnect_rate),
        silent_rate=table.real("silent_rate", b.silent_rate),
        hang_rate=table.real("hang_rate", b.hang_rate),
        malformed_rate=table.real("malformed_rate", b.malformed_rate),
        truncate_rate=table.real("truncate_rate", b.truncate_rate),
        retry_after_s=table.real("retry_after_s", b.retry_after_s),
        seed=int(table.get("seed", int, b.seed)),
        draw_by=str(table.get("draw_by", str, b.draw_by)),
    )
    table.finish()
    return config


def _models(table: TomlTable, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list of names, or one comma-separated string (as the ``--model`` flag gives it)."""
    value = table.get("models", (str, list, tuple), default)
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if all(isinstance(item, str) for item in value):
        return tuple(value)
    raise table.error("models", f"expected a string or a list of strings, got {value!r}")


def config_from_mapping(changes: Mapping[str, Any], base: SimConfig | None = None) -> SimConfig:
    """`base` (defaults if None) with `changes` applied."""
    return (base if base is not None else SimConfig()).updated(changes)


def load_toml_config(path: str | Path) -> SimConfig:
    """Reads the `[simulator]` table of a TOML file; a file without it yields the defaults."""
    return read_simulator(read_toml_file(path).table(TABLE), base=SimConfig())

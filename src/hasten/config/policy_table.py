"""One parameter policy as configured: ``[models.<name>.policy]`` or ``[tenants.<name>.policy]``.

A policy rewrites a chat or completions request before it goes upstream: a default and a
cap for ``max_tokens`` (the cap also holds ``max_completion_tokens``), a cap on ``n``,
default ``stop`` sequences, and fields to drop or set. What it does to one request is
decided in ``hasten.policy.decide``; how a model's and a tenant's policy combine as well.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from hasten.errors import ConfigError

if TYPE_CHECKING:
    # Only a type here: hasten.config imports this module to read the policy tables.
    from hasten.config.reader import TomlTable

ON_EXCEED = ("clamp", "reject")
# OpenAI takes up to four stop sequences; more would be refused upstream for every request.
MAX_STOP_SEQUENCES = 4
# What a request is: dropping or setting these would change which request it is, or how
# the gateway itself streams and caches it.
PROTECTED_FIELDS = frozenset({"model", "stream", "stream_options", "messages", "prompt", "input"})
# Fields with a knob of their own, so that a cap always holds whatever else is configured.
KNOB_FIELDS: Mapping[str, str] = {
    "max_tokens": "default_max_tokens / max_tokens_cap",
    "max_completion_tokens": "max_tokens_cap",
    "n": "max_n",
    "stop": "default_stop",
}


@dataclass(frozen=True)
class ParamPolicy:
    """What one policy does; every field's default does nothing."""

    default_max_tokens: int | None = None  # set as ``max_tokens`` when the client set no limit
    max_tokens_cap: int | None = None  # for max_tokens and max_completion_tokens
    max_n: int | None = None
    is_reject_on_exceed: bool = False  # on_exceed = "reject": a 400 instead of clamping
    default_stop: tuple[str, ...] = ()  # only when the client sent no stop sequence
    drop: tuple[str, ...] = ()
    set_fields: Mapping[str, Any] = field(default_factory=dict)  # ``set = { ... }``

    @property
    def is_empty(self) -> bool:
        return self == ParamPolicy()

    def describe(self) -> str:
        """One line for ``hasten check-config``."""
        parts = []
        if self.default_max_tokens is not None:
            parts.append(f"default max_tokens {self.default_max_tokens}")
        if self.max_tokens_cap is not None:
            parts.append(f"max_tokens cap {self.max_tokens_cap}")
        if self.max_n is not None:
            parts.append(f"max n {self.max_n}")
        if self.max_tokens_cap is not None or self.max_n is not None:
            parts.append(f"on exceed {'reject' if self.is_reject_on_exceed else 'clamp'}")
        if self.default_stop:
            parts.append(f"default stop {orjson.dumps(list(self.default_stop)).decode()}")
        if self.drop:
            parts.append(f"drop {', '.join(self.drop)}")
        for name, value in self.set_fields.items():
            parts.append(f"set {name}={orjson.dumps(value).decode()}")
        return "; ".join(parts) or "no rules"


def parse_policy(table: TomlTable) -> ParamPolicy:
    """Reads one ``policy`` table; every mistake is a ConfigError naming its key."""
    policy = ParamPolicy(
        default_max_tokens=_optional_count(table, "default_max_tokens"),
        max_tokens_cap=_optional_count(table, "max_tokens_cap"),
        max_n=_optional_count(table, "max_n"),
        is_reject_on_exceed=table.choice("on_exceed", "clamp", ON_EXCEED) == "reject",
        default_stop=_stops(table),
        drop=_drop(table),
        set_fields=_set_fields(table),
    )
    table.finish()
    cap, default = policy.max_tokens_cap, policy.default_max_tokens
    if cap is not None and default is not None and default > cap:
        raise table.error("default_max_tokens", f"{default} is above max_tokens_cap {cap}")
    for name in policy.drop:
        if name in policy.set_fields:
            raise table.error("drop", f"{name!r} is both dropped and set")
    return policy


def _optional_count(table: TomlTable, key: str) -> int | None:
    if table.get(key, int, None) is None:
        return None
    return table.integer(key, 1, minimum=1)


def _stops(table: TomlTable) -> tuple[str, ...]:
    value = table.get("default_stop", (str, list), None)
    stops = (value,) if isinstance(value, str) else table.strings("default_stop", ())
    if len(stops) > MAX_STOP_SEQUENCES or "" in stops:
        raise table.error(
            "default_stop", f"expected 1 to {MAX_STOP_SEQUENCES} non-empty strings, got {value!r}"
        )
    return stops


def _check_field_name(table: TomlTable, key: str, name: str) -> None:
    if name in PROTECTED_FIELDS:
        raise table.error(key, f"{name!r} cannot be dropped or set by a policy")
    if name in KNOB_FIELDS:
        raise table.error(key, f"{name!r} has its own setting: use {KNOB_FIELDS[name]}")
    if not name:
        raise table.error(key, "expected a field name, got an empty string")


def _drop(table: TomlTable) -> tuple[str, ...]:
    names = table.strings("drop", ())
    for i, name in enumerate(names):
        _check_field_name(table, f"drop[{i}]", name)
    return tuple(dict.fromkeys(names))  # each once, in the order written


def _set_fields(table: TomlTable) -> dict[str, Any]:
    values: dict[str, Any] = dict(table.get("set", dict, {}))
    for name, value in values.items():
        key = f"set.{name}"
        _check_field_name(table, key, name)
        _check_json(value, table.where(key))
    return values


def _check_json(value: Any, where: str) -> None:
    """TOML has dates, times and non-finite floats, none of which a JSON body can carry."""
    if isinstance(value, datetime.date | datetime.time):
        raise ConfigError(f"{where}: a date or time is not a JSON value; write it as a string")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a JSON number")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for name, item in value.items():
            _check_json(item, f"{where}.{name}")

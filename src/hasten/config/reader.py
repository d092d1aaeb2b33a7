"""A TOML table being read: typed getters whose errors name the dotted path of the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hasten.errors import ConfigError


class TomlTable:
    """A TOML table being read, which remembers its path for precise error messages."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self.data = data
        self.path = path
        self.seen: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        # bool is an int in Python; a TOML `true` must not pass as a number.
        is_bool_mismatch = isinstance(value, bool) and bool not in _as_tuple(kind)
        if not isinstance(value, kind) or is_bool_mismatch:
            raise ConfigError(
                f"{self._where(key)}: expected {_kind_name(kind)}, got {type(value).__name__} "
                f"{value!r}"
            )
        return value

    def number(self, key: str, default: float, *, minimum: float = 0.0) -> float:
        value = float(self.get(key, (int, float), default))
        if value < minimum or (minimum == 0.0 and value <= 0.0 and key.endswith("_s")):
            raise ConfigError(f"{self._where(key)}: must be > {minimum:g}, got {value:g}")
        return value

    def integer(self, key: str, default: int, *, minimum: int = 0) -> int:
        value = int(self.get(key, int, default))
        if value < minimum:
            raise ConfigError(f"{self._where(key)}: must be >= {minimum}, got {value}")
        return value

    def table(self, key: str) -> TomlTable:
        return TomlTable(self.get(key, dict, {}), self._where(key))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            where = f"[{self.path}]" if self.path else "the top level"
            raise ConfigError(
                f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(self.seen))})"
            )


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        dict: "a table",
        list: "a list",
    }
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))

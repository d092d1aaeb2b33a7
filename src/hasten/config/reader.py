"""The one TOML reader: typed getters, range checks and unknown-key detection for every table.

Every config error has one shape, ``<dotted path>: <problem>``, the path being the key (or
the table) as it is spelled in TOML: ``server.port: expected an integer, got str 'x'``,
``semantic.enabld: unknown key (known: embedder, enabled, ...)``. Checks made after a
table was read (on a dataclass, on a flag) use the same shape with their own path.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasten.errors import ConfigError

# The largest integer a float holds exactly; JSON may carry bigger ones (control APIs).
MAX_EXACT_FLOAT_INT = 2**53


class TomlTable:
    """A TOML table being read, which remembers its path for precise error messages."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self.data = data
        self.path = path
        self.seen: set[str] = set()

    def where(self, key: str) -> str:
        """The dotted path of ``key`` in this table."""
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, problem: str) -> ConfigError:
        """A ConfigError about ``key`` (or about the whole table when ``key`` is None)."""
        return ConfigError(f"{self.where(key) if key else self.path}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        # bool is an int in Python; a TOML `true` must not pass as a number.
        is_bool_mismatch = isinstance(value, bool) and bool not in _as_tuple(kind)
        if not isinstance(value, kind) or is_bool_mismatch:
            raise self.error(
                key, f"expected {_kind_name(kind)}, got {type(value).__name__} {value!r}"
            )
        return value

    def string(self, key: str, default: str) -> str:
        return str(self.get(key, str, default))

    def optional_string(self, key: str) -> str | None:
        value = self.get(key, str, None)
        return None if value is None else str(value)

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self.get(key, bool, default))

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(key, default)
        if value not in choices:
            raise self.error(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """A list of strings, as a tuple."""
        value = self.get(key, list, None)
        if value is None:
            return default
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{key}[{i}]", f"expected a string, got {item!r}")
        return tuple(value)

    def real(self, key: str, default: float) -> float:
        """Any number, as a float; no range check."""
        value = self.get(key, (int, float), default)
        if isinstance(value, int) and abs(value) > MAX_EXACT_FLOAT_INT:
            raise self.error(key, f"out of range: {value!r}")
        return float(value)

    def optional_real(self, key: str) -> float | None:
        return None if self.get(key, (int, float), None) is None else self.real(key, 0.0)

    def number(self, key: str, default: float, *, minimum: float = 0.0) -> float:
        """A number >= ``minimum``; a duration (``*_s``) with minimum 0 must be > 0."""
        value = float(self.get(key, (int, float), default))
        if minimum == 0.0 and key.endswith("_s") and value <= 0.0:
            raise self.error(key, f"must be > 0, got {value:g}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum:g}, got {value:g}")
        return value

    def integer(self, key: str, default: int, *, minimum: int = 0) -> int:
        value = int(self.get(key, int, default))
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return value

    def table(self, key: str) -> TomlTable:
        return TomlTable(self.get(key, dict, {}), self.where(key))

    def finish(self) -> None:
        """Refuses any key no getter asked for: a typo is an error, never a silent default."""
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            known = ", ".join(sorted(self.seen)) or "none"
            raise self.error(unknown[0], f"unknown key (known: {known})")


def read_toml_file(path: str | os.PathLike[str]) -> TomlTable:
    """The top level of the TOML file at ``path``; an unreadable file is a ConfigError."""
    try:
        return TomlTable(tomllib.loads(Path(path).read_text(encoding="utf-8")), "")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


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

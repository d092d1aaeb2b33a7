"""``[keys]``: virtual keys (created at run time through ``/admin/keys``), and the limit and
model fields of ``[server] api_keys`` entries, checked as the admin API checks them.

Virtual keys are off unless ``enabled = true``; on, gateway keys are enforced (a request
needs a static or a virtual key). Where they live follows the deployment: the fleet's Redis
with ``[fleet] redis_url`` (every replica sees the same keys), else the SQLite file
``sqlite_path``, else this process's memory (gone on restart; refused with ``workers`` > 1,
whose processes would each see their own keys).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hasten.config.fleet import FleetConfig
from hasten.config.key_fields import LIMIT_FIELDS, key_limits, key_models
from hasten.config.limits import KeyLimits
from hasten.config.reader import TomlTable
from hasten.errors import ConfigError, InvalidKeyField

DEFAULT_MAX_KEYS = 10_000
MAX_MAX_KEYS = 1_000_000
DEFAULT_CACHE_TTL_S = 1.0  # how soon every replica refuses a revoked or rotated key
MAX_CACHE_TTL_S = 60.0
DEFAULT_MAX_CACHED_UNKNOWN = 10_000
# A static key's id: what limits and metrics call it. vk_ is the virtual keys' prefix.
STATIC_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True, slots=True)
class KeysConfig:
    is_enabled: bool = False
    store: str = "memory"  # derived: redis with [fleet] redis_url, sqlite with sqlite_path
    sqlite_path: str | None = None
    max_keys: int = DEFAULT_MAX_KEYS
    cache_ttl_s: float = DEFAULT_CACHE_TTL_S
    max_cached_unknown: int = DEFAULT_MAX_CACHED_UNKNOWN


def parse_keys(
    table: TomlTable, fleet: FleetConfig, static_ids: tuple[str | None, ...], num_workers: int
) -> KeysConfig:
    d = KeysConfig()
    is_enabled = table.boolean("enabled", d.is_enabled)
    sqlite_path = table.optional_string("sqlite_path")
    config = KeysConfig(
        is_enabled=is_enabled,
        store="redis" if fleet.is_enabled else "sqlite" if sqlite_path else "memory",
        sqlite_path=sqlite_path,
        max_keys=table.integer("max_keys", d.max_keys, minimum=1),
        cache_ttl_s=table.number("cache_ttl_s", d.cache_ttl_s),
        max_cached_unknown=table.integer("max_cached_unknown", d.max_cached_unknown, minimum=1),
    )
    table.finish()
    if config.max_keys > MAX_MAX_KEYS:
        raise table.error("max_keys", f"must be <= {MAX_MAX_KEYS}, got {config.max_keys}")
    if config.cache_ttl_s > MAX_CACHE_TTL_S:
        raise table.error("cache_ttl_s", f"must be <= {MAX_CACHE_TTL_S:g} (revocation waits it)")
    if sqlite_path is not None and not is_enabled:
        raise table.error("sqlite_path", "virtual keys are off: set keys.enabled = true")
    if sqlite_path is not None and fleet.is_enabled:
        raise table.error("sqlite_path", "with [fleet] redis_url the keys live in Redis")
    if is_enabled and config.store == "memory" and num_workers > 1:
        raise table.error(
            "enabled", "with [server] workers > 1 set keys.sqlite_path (or [fleet] redis_url)"
        )
    _check_static_ids(table, static_ids)
    return config


def static_key_fields(
    table: TomlTable,
) -> tuple[str | None, frozenset[str] | None, KeyLimits | None]:
    """An ``api_keys`` entry's optional ``id``, ``models`` and limit fields."""
    key_id = table.optional_string("id")
    if key_id is not None and (STATIC_KEY_ID.fullmatch(key_id) is None or key_id.startswith("vk_")):
        raise table.error(
            "id", "expected 1 to 64 letters, digits, '.', '_' or '-', not starting with 'vk_'"
        )
    raw_models = table.get("models", list, None)
    values = {name: table.get(name, (int, float, str), None) for name in LIMIT_FIELDS}
    try:
        models = key_models(raw_models)
        limits = key_limits({name: value for name, value in values.items() if value is not None})
    except InvalidKeyField as exc:
        raise table.error(exc.field, exc.problem) from None
    return key_id, models, None if limits.is_unlimited else limits


def _check_static_ids(table: TomlTable, static_ids: tuple[str | None, ...]) -> None:
    seen: set[str] = set()
    for i, key_id in enumerate(static_ids):
        if key_id is None:
            continue
        if key_id in seen:
            raise ConfigError(f"server.api_keys[{i}].id: duplicate id {key_id!r}")
        seen.add(key_id)


def describe_keys(config: KeysConfig) -> str:
    """One line for ``hasten check-config`` and the serve banner."""
    where = {"redis": "the fleet's Redis", "memory": "memory, lost on restart"}
    store = where.get(config.store, f"SQLite {config.sqlite_path}")
    return (
        f"virtual keys: on ({store}; at most {config.max_keys}; a revoked key is refused "
        f"everywhere within {config.cache_ttl_s:g}s)"
    )

"""The virtual keys a gateway serves, built from ``[keys]`` (None when they are off)."""

from __future__ import annotations

import logging

from hasten.config import GatewayConfig
from hasten.fleet.link import FleetLink
from hasten.keys.directory import KeyDirectory
from hasten.keys.lookup import ResolvedKeys
from hasten.keys.store import KeyStore, MemoryKeyStore

_log = logging.getLogger("hasten.keys")


def build_key_directory(config: GatewayConfig, fleet: FleetLink | None) -> KeyDirectory | None:
    keys = config.keys
    if not keys.is_enabled:
        return None
    store: KeyStore
    if keys.store == "redis":
        from hasten.keys.redis_store import RedisKeyStore

        assert fleet is not None, "[keys] store redis comes with [fleet] redis_url"
        store = RedisKeyStore(fleet)
        where = "the fleet's Redis"
    elif keys.sqlite_path is not None:
        from hasten.keys.sqlite_store import SqliteKeyStore

        store = SqliteKeyStore(keys.sqlite_path)
        where = f"SQLite {keys.sqlite_path}"
    else:
        store = MemoryKeyStore()
        where = "memory"
        _log.warning(
            "virtual keys are kept in memory: they vanish on restart (set [keys] sqlite_path, "
            "or [fleet] redis_url for a fleet, to keep them)"
        )
    _log.info(
        "virtual keys: in %s, at most %d; a revoked or rotated key is refused everywhere "
        "within %g s",
        where,
        keys.max_keys,
        keys.cache_ttl_s,
    )
    if config.server.admin_api_key is None:
        _log.warning(
            "virtual keys are on but no admin key is set: no key can be created, rotated or "
            "revoked until one is (export HASTEN_ADMIN_API_KEY)"
        )
    cache = ResolvedKeys(
        ttl_s=keys.cache_ttl_s, max_known=keys.max_keys, max_unknown=keys.max_cached_unknown
    )
    return KeyDirectory(store, cache, max_keys=keys.max_keys)

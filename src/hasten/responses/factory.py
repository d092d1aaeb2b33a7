"""The Responses API's state as ``[responses]`` (and the deployment) says."""

from __future__ import annotations

import logging

from hasten.apis.known import RESPONSES
from hasten.config import GatewayConfig
from hasten.fleet.link import FleetLink
from hasten.responses.state import ResponseState
from hasten.responses.store import MemoryResponseStore, ResponseStore

_log = logging.getLogger("hasten.responses")


def build_response_state(config: GatewayConfig, fleet: FleetLink | None) -> ResponseState:
    settings = config.responses
    backend = settings.backend_for(config.cache.backend, config.fleet)
    max_bytes, max_record_bytes = settings.max_bytes, settings.max_record_bytes
    store: ResponseStore
    if backend == "redis":
        from hasten.responses.redis_store import RedisResponseStore

        assert fleet is not None, "[responses] backend redis comes with [fleet] redis_url"
        store = RedisResponseStore(fleet, max_bytes=max_bytes, max_record_bytes=max_record_bytes)
    elif backend == "sqlite":
        from hasten.responses.sqlite_store import SQLiteResponseStore

        store = SQLiteResponseStore(
            settings.sqlite_path_beside(config.cache.sqlite_path),
            max_bytes=max_bytes,
            max_record_bytes=max_record_bytes,
        )
    else:
        store = MemoryResponseStore(max_bytes=max_bytes, max_record_bytes=max_record_bytes)
        if config.server.num_workers > 1:
            _log.warning(
                "stored responses are kept in each worker's memory: a follow-up served by "
                "another worker will not find them (set [responses] path)"
            )
    return ResponseState(
        store,
        ttl_s=settings.ttl_s,
        max_record_bytes=settings.max_record_bytes,
        max_history_bytes=config.server.max_body_bytes,
        max_chain_depth=settings.max_chain_depth,
        max_json_depth=config.server.max_json_depth,
        # Their answers carry the upstream's own ids: a follow-up may name one to them.
        holders=frozenset(
            name for name, upstream in config.upstreams.items() if RESPONSES in upstream.speaks
        ),
    )

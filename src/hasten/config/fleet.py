"""``[fleet]``: what several gateway replicas share through one Redis.

Off unless ``redis_url`` is set. With it, replicas coalesce identical requests across the
fleet, share what they learn of deployments (latency estimates, breaker trips, the hedge
budget) and count gateway keys' limits exactly. Redis away, each replica falls back to its
own view, as a single gateway works.
"""

from __future__ import annotations

from dataclasses import dataclass

from hasten.config.reader import TomlTable

DEFAULT_KEY_PREFIX = "hasten:fleet:"
DEFAULT_OP_TIMEOUT_S = 0.25
DEFAULT_CONNECT_TIMEOUT_S = 0.25
DEFAULT_RETRY_BACKOFF_S = 1.0
# A leader renews its lease every lease_s / 3; a dead leader is noticed within lease_s.
DEFAULT_LEASE_S = 2.0
DEFAULT_STREAM_MAX_CHUNKS = 10_000
DEFAULT_STREAM_TTL_S = 60.0
DEFAULT_SYNC_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class FleetConfig:
    redis_url: str | None = None
    key_prefix: str = DEFAULT_KEY_PREFIX
    op_timeout_s: float = DEFAULT_OP_TIMEOUT_S
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    is_coalescing: bool = True  # `coalescing`: share one upstream call across replicas
    lease_s: float = DEFAULT_LEASE_S
    stream_max_chunks: int = DEFAULT_STREAM_MAX_CHUNKS
    stream_ttl_s: float = DEFAULT_STREAM_TTL_S
    is_sharing_routing: bool = True  # `shared_routing`: estimates, breakers, hedge budget
    sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S

    @property
    def is_enabled(self) -> bool:
        return self.redis_url is not None


def parse_fleet(table: TomlTable) -> FleetConfig:
    d = FleetConfig()
    url = table.optional_string("redis_url")
    if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
        raise table.error(
            "redis_url", f"expected a redis://, rediss:// or unix:// URL, got {url!r}"
        )
    config = FleetConfig(
        redis_url=url,
        key_prefix=table.string("key_prefix", d.key_prefix),
        op_timeout_s=table.number("op_timeout_s", d.op_timeout_s),
        connect_timeout_s=table.number("connect_timeout_s", d.connect_timeout_s),
        retry_backoff_s=table.number("retry_backoff_s", d.retry_backoff_s),
        is_coalescing=table.boolean("coalescing", d.is_coalescing),
        lease_s=table.number("lease_s", d.lease_s),
        stream_max_chunks=table.integer("stream_max_chunks", d.stream_max_chunks, minimum=16),
        stream_ttl_s=table.number("stream_ttl_s", d.stream_ttl_s),
        is_sharing_routing=table.boolean("shared_routing", d.is_sharing_routing),
        sync_interval_s=table.number("sync_interval_s", d.sync_interval_s),
    )
    table.finish()
    for key, value in (
        ("op_timeout_s", config.op_timeout_s),
        ("connect_timeout_s", config.connect_timeout_s),
        ("lease_s", config.lease_s),
        ("stream_ttl_s", config.stream_ttl_s),
        ("sync_interval_s", config.sync_interval_s),
    ):
        if value <= 0:
            raise table.error(key, f"must be > 0, got {value:g}")
    return config

"""Gateway configuration: frozen dataclasses with named defaults, loaded from TOML.

Precedence: command-line flags > environment variables > config file > defaults.
Secrets are read from the environment (``api_key_env``) or the file, never logged:
the dataclasses that hold them exclude the secret from ``repr``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hasten.config.cache_policy import ModelCachePolicy
from hasten.config.fleet import FleetConfig, parse_fleet
from hasten.config.hybrid import HybridConfig, parse_hybrid
from hasten.config.keys_table import KeysConfig, parse_keys, static_key_fields
from hasten.config.limits import KeyLimits
from hasten.config.limits_table import LimitsConfig, parse_limits
from hasten.config.local import LocalServerConfig, parse_local
from hasten.config.metrics import MetricsConfig, parse_metrics
from hasten.config.policy_table import ParamPolicy, parse_policy
from hasten.config.prices import ModelPrice, parse_prices
from hasten.config.reader import TomlTable, read_toml_file
from hasten.config.responses import ResponsesConfig, parse_responses
from hasten.config.routing import (
    DeploymentConfig,
    RoutingConfig,
    parse_deployment,
    parse_routing,
)
from hasten.config.semantic import SemanticConfig, parse_semantic
from hasten.config.telemetry import TelemetryConfig, parse_telemetry
from hasten.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_URL_BYTES = 8 * 1024
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 1024
DEFAULT_NUM_WORKERS = 1
# Each worker holds its own L1 and upstream pools: more than this is a typo, not a plan.
MAX_NUM_WORKERS = 64
# The upstream HTTP client (hasten.upstream.lean or .transport): lean measured faster.
UPSTREAM_CLIENTS = ("lean", "aiohttp")
DEFAULT_UPSTREAM_CLIENT = "lean"
DEFAULT_L1_MAX_BYTES = 64 * 1024 * 1024
# The most hasten holds of one upstream answer (hasten.upstream.bounded): a 128k-token stream
# is ~40 MB of events, 2048 embeddings of 3072 dimensions ~34 MB as base64; an answer past
# it (a broken or hostile upstream's endless body) fails as a 502.
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
DEFAULT_TTL_S = 3600.0
DEFAULT_SQLITE_PATH = "hasten-cache.sqlite3"
DEFAULT_SQLITE_MAX_BYTES = 1024 * 1024 * 1024  # the SQLite tier's stored bytes, at most
# Where the admin key is read from unless [server] admin_api_key_env names another variable.
DEFAULT_ADMIN_KEY_ENV = "HASTEN_ADMIN_API_KEY"
WILDCARD_MODEL = "*"
CACHE_BACKENDS = ("memory", "sqlite", "redis")
REPLAY_MODES = ("instant", "paced")

# Deep enough for any real request (tool schemas nest a dozen levels), shallow enough that
# every later serialisation stays far below orjson's 254-level limit.
DEFAULT_MAX_JSON_DEPTH = 64
# The cache key wraps a body two levels deeper; orjson refuses to serialise past 254.
MAX_JSON_DEPTH_LIMIT = 200
# Messages (chat), prompts (completions) or inputs (embeddings) in one request: as many as
# any API takes (Anthropic's 100 000 messages), and a bound on the work one body is.
DEFAULT_MAX_MESSAGES = 100_000
LOG_FORMATS = ("text", "json")
# Every client API hasten speaks (hasten.apis.known), and what an upstream speaks by default.
CLIENT_APIS = ("chat", "completions", "embeddings", "responses", "messages")
COMPATIBLE_APIS = ("chat", "completions", "embeddings")
OPENAI_APIS = ("chat", "completions", "embeddings", "responses")
ANTHROPIC_APIS = ("messages",)


@dataclass(frozen=True)
class TimeoutConfig:
    """Per-upstream timeouts; ``first_byte_s`` is time to the response headers."""

    connect_s: float = 5.0
    first_byte_s: float = 120.0
    idle_s: float = 60.0
    total_s: float = 600.0


@dataclass(frozen=True)
class RetryConfig:
    """Retries on connect errors, 429 and 5xx, before any byte reached the client."""

    max_retries: int = 2
    backoff_base_s: float = 0.2
    backoff_max_s: float = 8.0
    max_retry_after_s: float = 30.0


# vLLM/SGLang: ``continue_final_message`` with ``add_generation_prompt: false``; DeepSeek:
# ``prefix: true`` on the last assistant message. "none": the upstream cannot continue one.
PREFILL_MECHANISMS = ("none", "continue_final_message", "assistant_prefix")


@dataclass(frozen=True)
class UpstreamConfig:
    name: str
    url: str
    api_key: str | None = field(default=None, repr=False)
    timeouts: TimeoutConfig = TimeoutConfig()
    retry: RetryConfig = RetryConfig()
    max_connections: int = 256
    # Attempts in flight to it at once, across every route that uses it (each gateway
    # process counts its own); one more is refused at once as busy: another deployment
    # takes it, or the client gets a 429 with Retry-After (hasten.routing.gate). 0: no cap.
    max_in_flight: int = 0
    # False for servers that reject ``stream_options`` (older Azure OpenAI API versions):
    # hasten then never adds it, and streams cached from them replay without usage.
    has_stream_options: bool = True
    # A non-stream chat/completions request is asked of this upstream as a stream and
    # assembled (so TTFT timeouts, failover and hedging see its first token); False for
    # servers whose streamed answer differs from their whole one. Needs ``stream_options``.
    is_stream_upstream: bool = True
    # How this upstream continues an assistant message it is given (a stream resumed by
    # prefill, hasten.proxy.continuation): one of PREFILL_MECHANISMS.
    prefill: str = "none"
    # The most bytes of one answer (body or stream) hasten reads and holds from it.
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    # The client APIs it speaks natively (``api = [...]``; empty: inferred from the URL,
    # ``speaks``): a request in one of them passes through as sent, any other is translated.
    apis: tuple[str, ...] = ()
    # A Messages request to it without cache_control gets Anthropic prompt-cache
    # breakpoints on its stable prefix (hasten.apis.cache_control); off by default.
    is_auto_cache_control: bool = False
    # False for a server that would ignore a request's ``tools`` and answer in plain text
    # (a local model whose chat template has none): such a request fails over, or is a 400.
    has_tools: bool = True

    @functools.cached_property  # asked on every attempt: its host read once
    def speaks(self) -> tuple[str, ...]:
        """The APIs this upstream speaks: as configured, else by its host (Anthropic's
        speaks Messages only, OpenAI's Chat Completions and Responses too, any other
        OpenAI-compatible server Chat Completions, Completions and Embeddings)."""
        if self.apis:
            return self.apis
        host = self.url.split("://", 1)[-1].split("/", 1)[0].lower()
        if host.endswith("anthropic.com"):
            return ANTHROPIC_APIS
        if host.endswith("openai.com"):
            return OPENAI_APIS
        return COMPATIBLE_APIS


@dataclass(frozen=True)
class ModelRoute:
    """Where a model name goes: a primary upstream, then fallbacks in order.

    With ``deployments`` in the TOML, ``upstream`` and ``fallbacks`` are derived from them
    (best priority first) and ``routing.deployments`` holds weights, priorities and limits.
    """

    name: str
    upstream: str
    fallbacks: tuple[str, ...] = ()
    upstream_model: str | None = None
    cache: ModelCachePolicy | None = None
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    policy: ParamPolicy | None = None  # [models.<name>.policy]: hasten.policy
    # A stream that breaks after bytes reached the client is continued (hasten.proxy.resumer).
    is_resuming_streams: bool = False


@dataclass(frozen=True)
class CacheConfig:
    is_enabled: bool = True
    backend: str = "sqlite"
    sqlite_path: str = DEFAULT_SQLITE_PATH
    sqlite_max_bytes: int = DEFAULT_SQLITE_MAX_BYTES
    redis_url: str | None = None
    l1_max_bytes: int = DEFAULT_L1_MAX_BYTES
    ttl_s: float = DEFAULT_TTL_S
    is_deterministic_only: bool = True
    replay: str = "instant"
    replay_chunk_interval_ms: float = 20.0
    is_shared_across_tenants: bool = False


@dataclass(frozen=True)
class TenantKey:
    tenant: str
    key: str = field(repr=False)
    key_id: str | None = None  # a virtual key's id (the admin API's handle on it)
    limits: KeyLimits | None = None
    models: frozenset[str] | None = None  # the models this key may call; None: any


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Per connection (hasten.server.connection): what one client can hold of the server.
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_url_bytes: int = DEFAULT_MAX_URL_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # connect (or first byte) to headers
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S  # headers to the end of the body
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT  # 0: no cap
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    # Messages (chat), prompts (completions) or inputs (embeddings) one request may carry.
    max_messages: int = DEFAULT_MAX_MESSAGES
    api_keys: tuple[TenantKey, ...] = ()
    # The operator's key for /admin/* and global views; None: the admin API is off.
    admin_api_key: str | None = field(default=None, repr=False)
    log_level: str = "info"
    log_format: str = "text"  # or "json": one object per line (hasten.server.logs)
    # Gateway processes sharing the listening socket (hasten.server.workers); 1: in-process.
    num_workers: int = DEFAULT_NUM_WORKERS
    upstream_client: str = DEFAULT_UPSTREAM_CLIENT  # one of UPSTREAM_CLIENTS


@dataclass(frozen=True)
class GatewayConfig:
    server: ServerConfig = ServerConfig()
    upstreams: Mapping[str, UpstreamConfig] = field(default_factory=dict)
    models: Mapping[str, ModelRoute] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    cache: CacheConfig = CacheConfig()
    local: LocalServerConfig | None = None  # the llama.cpp engine child, when enabled
    hybrid: HybridConfig | None = None
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    # [tenants.<name>.policy], by tenant (a tenant of [server] api_keys): hasten.policy
    tenant_policies: Mapping[str, ParamPolicy] = field(default_factory=dict)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)  # replicas sharing one Redis
    keys: KeysConfig = field(default_factory=KeysConfig)  # virtual keys (hasten.keys)
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)  # [prices."<model>"]
    limits: LimitsConfig = field(default_factory=LimitsConfig)  # [limits]: reservations
    responses: ResponsesConfig = field(default_factory=ResponsesConfig)  # stored responses

    @property
    def is_simulated(self) -> bool:
        """True when no upstream is configured and the built-in simulator stands in."""
        return not self.upstreams


def _secret(table: TomlTable, env: Mapping[str, str], *, what: str) -> str | None:
    """Reads ``api_key`` or ``api_key_env`` (the name of an environment variable)."""
    literal = table.get("api_key", str, None)
    env_name = table.get("api_key_env", str, None)
    if literal is not None and env_name is not None:
        raise table.error(None, "set api_key or api_key_env, not both")
    if env_name is None:
        return literal  # type: ignore[no-any-return]
    value = env.get(env_name)
    if not value:
        raise table.error("api_key_env", f"environment variable {env_name} for {what} is not set")
    return value


def _timeouts(table: TomlTable) -> TimeoutConfig:
    d = TimeoutConfig()
    return TimeoutConfig(
        connect_s=table.number("connect_timeout_s", d.connect_s),
        first_byte_s=table.number("first_byte_timeout_s", d.first_byte_s),
        idle_s=table.number("idle_timeout_s", d.idle_s),
        total_s=table.number("total_timeout_s", d.total_s),
    )


def _retry(table: TomlTable) -> RetryConfig:
    d = RetryConfig()
    return RetryConfig(
        max_retries=table.integer("max_retries", d.max_retries),
        backoff_base_s=table.number("backoff_base_s", d.backoff_base_s),
        backoff_max_s=table.number("backoff_max_s", d.backoff_max_s),
        max_retry_after_s=table.number("max_retry_after_s", d.max_retry_after_s),
    )


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, fit for banners, logs and errors."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    # A user name alone may itself be the token (``https://sk-...@host``): hide it too.
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}://{shown}@{host}{slash}{path}"


def check_url(url: str, where: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: expected an http:// or https:// URL, got {redact_url(url)!r}")
    authority = url.split("://", 1)[1].split("/", 1)[0]
    if "@" in authority:
        # Refused rather than turned into basic auth: hasten authenticates upstream with a
        # bearer key (or passes the caller's), and a URL is printed in banners and logs.
        raise ConfigError(
            f"{where}: credentials in the URL ({redact_url(url)}) are not supported; "
            "give the upstream key as api_key_env (or --upstream plus HASTEN_UPSTREAM_API_KEY)"
        )
    return url.rstrip("/")


def _upstream(name: str, table: TomlTable, env: Mapping[str, str]) -> UpstreamConfig:
    url = table.get("url", str, None)
    if url is None:
        raise table.error(None, "missing required key 'url'")
    config = UpstreamConfig(
        name=name,
        url=check_url(url, table.where("url")),
        api_key=_secret(table, env, what=f"upstream {name!r}"),
        timeouts=_timeouts(table),
        retry=_retry(table),
        max_connections=table.integer("max_connections", 256, minimum=1),
        max_in_flight=table.integer("max_in_flight", 0, minimum=0),
        has_stream_options=table.get("stream_options", bool, True),
        is_stream_upstream=table.get("stream_upstream", bool, True),
        prefill=table.choice("prefill", "none", PREFILL_MECHANISMS),
        max_answer_bytes=table.integer(
            "max_answer_bytes", DEFAULT_MAX_ANSWER_BYTES, minimum=64 * 1024
        ),
        apis=_apis(table),
        is_auto_cache_control=table.get("auto_cache_control", bool, False),
        has_tools=table.get("tools", bool, True),
    )
    table.finish()
    return config


def _apis(table: TomlTable) -> tuple[str, ...]:
    """``api = ["chat", "responses"]``: the client APIs an upstream speaks natively."""
    value = table.get("api", list, [])
    for name in value:
        if name not in CLIENT_APIS:
            raise table.error("api", f"unknown API {name!r} (known: {', '.join(CLIENT_APIS)})")
    if not value and "api" in table.data:
        raise table.error("api", "an empty list: name the APIs it speaks, or leave it out")
    return tuple(dict.fromkeys(value))


def _model_cache(table: TomlTable, base: CacheConfig) -> ModelCachePolicy:
    config = ModelCachePolicy(
        is_enabled=table.get("enabled", bool, True),
        is_deterministic_only=table.get("deterministic_only", bool, base.is_deterministic_only),
        ttl_s=table.number("ttl_s", base.ttl_s),
    )
    table.finish()
    return config


def _route(
    name: str, table: TomlTable, upstreams: Mapping[str, Any], cache: CacheConfig
) -> ModelRoute:
    deployments = _deployments(table, upstreams)
    if deployments:
        upstream, fallbacks = deployments[0].upstream, [d.upstream for d in deployments[1:]]
    else:
        upstream, fallbacks = _upstream_and_fallbacks(table, upstreams)
    has_cache, cache_table = "cache" in table.data, table.table("cache")
    route = ModelRoute(
        name=name,
        upstream=upstream,
        fallbacks=tuple(fallbacks),
        upstream_model=table.get("upstream_model", str, None),
        cache=_model_cache(cache_table, cache) if has_cache else None,
        routing=parse_routing(table.table("routing"), deployments),
        policy=parse_policy(table.table("policy")) if "policy" in table.data else None,
        is_resuming_streams=table.get("resume_streams", bool, False),
    )
    table.finish()
    return route


def _upstream_and_fallbacks(
    table: TomlTable, upstreams: Mapping[str, Any]
) -> tuple[str, list[Any]]:
    upstream = table.get("upstream", str, None)
    if upstream is None:
        raise table.error(None, "missing required key 'upstream' (or 'deployments')")
    fallbacks = table.get("fallbacks", list, [])
    for i, target in enumerate([upstream, *fallbacks]):
        if not isinstance(target, str):
            raise table.error(f"fallbacks[{i - 1}]", "expected a string")
        if target not in upstreams:
            key = "upstream" if i == 0 else f"fallbacks[{i - 1}]"
            known = ", ".join(sorted(upstreams)) or "none"
            raise table.error(key, f"unknown upstream {target!r} (known: {known})")
    return upstream, fallbacks


def _deployments(table: TomlTable, upstreams: Mapping[str, Any]) -> tuple[DeploymentConfig, ...]:
    """``deployments = [{ upstream = "east", weight = 2 }, ...]``, sorted best priority first."""
    items = table.get("deployments", list, None)
    if items is None:
        return ()
    if "upstream" in table.data or "fallbacks" in table.data:
        raise table.error(None, "set 'deployments' or 'upstream'/'fallbacks', not both")
    if not items:
        raise table.error("deployments", "needs at least one deployment")
    parsed: list[DeploymentConfig] = []
    for i, item in enumerate(items):
        where = table.where(f"deployments[{i}]")
        if not isinstance(item, dict):
            raise ConfigError(f'{where}: expected a table like {{ upstream = "name" }}')
        deployment = parse_deployment(TomlTable(item, where), upstreams)
        if any(d.upstream == deployment.upstream for d in parsed):
            raise ConfigError(f"{where}.upstream: {deployment.upstream!r} is listed twice")
        parsed.append(deployment)
    # Stable: equal priorities keep the order they were written in.
    return tuple(sorted(parsed, key=lambda d: d.priority))


def _cache(table: TomlTable) -> CacheConfig:
    d = CacheConfig()
    config = CacheConfig(
        is_enabled=table.get("enabled", bool, d.is_enabled),
        backend=table.get("backend", str, d.backend),
        sqlite_path=table.get("sqlite_path", str, d.sqlite_path),
        sqlite_max_bytes=table.integer("sqlite_max_bytes", d.sqlite_max_bytes, minimum=1),
        redis_url=table.get("redis_url", str, d.redis_url),
        l1_max_bytes=table.integer("l1_max_bytes", d.l1_max_bytes, minimum=0),
        ttl_s=table.number("ttl_s", d.ttl_s),
        is_deterministic_only=table.get("deterministic_only", bool, d.is_deterministic_only),
        replay=table.get("replay", str, d.replay),
        replay_chunk_interval_ms=table.number(
            "replay_chunk_interval_ms", d.replay_chunk_interval_ms
        ),
        is_shared_across_tenants=table.get("shared_across_tenants", bool, False),
    )
    table.finish()
    return check_cache(config, table.path)


def check_cache(config: CacheConfig, where: str = "cache") -> CacheConfig:
    if config.backend not in CACHE_BACKENDS:
        raise ConfigError(
            f"{where}.backend: expected one of {', '.join(CACHE_BACKENDS)}, got {config.backend!r}"
        )
    if config.replay not in REPLAY_MODES:
        raise ConfigError(
            f"{where}.replay: expected one of {', '.join(REPLAY_MODES)}, got {config.replay!r}"
        )
    if config.backend == "redis" and not (config.redis_url or "").startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise ConfigError(f"{where}.redis_url: backend 'redis' needs a redis:// URL")
    return config


def _server(table: TomlTable, env: Mapping[str, str]) -> ServerConfig:
    d = ServerConfig()
    keys: list[TenantKey] = []
    for i, item in enumerate(table.get("api_keys", list, [])):
        if not isinstance(item, dict):
            raise table.error(f"api_keys[{i}]", "expected a table")
        key_table = TomlTable(item, table.where(f"api_keys[{i}]"))
        tenant = key_table.get("tenant", str, None)
        secret = _secret(key_table, env, what="a gateway key")
        if tenant is None or secret is None:
            raise key_table.error(None, "needs 'tenant' and 'api_key' or 'api_key_env'")
        key_id, models, limits = static_key_fields(key_table)
        key_table.finish()
        keys.append(TenantKey(tenant, secret, key_id=key_id, limits=limits, models=models))
    config = ServerConfig(
        host=table.get("host", str, d.host),
        port=table.integer("port", d.port, minimum=0),
        max_body_bytes=table.integer("max_body_bytes", d.max_body_bytes, minimum=1),
        max_header_bytes=table.integer("max_header_bytes", d.max_header_bytes, minimum=1024),
        max_url_bytes=table.integer("max_url_bytes", d.max_url_bytes, minimum=64),
        header_timeout_s=table.number("header_timeout_s", d.header_timeout_s),
        body_timeout_s=table.number("body_timeout_s", d.body_timeout_s),
        max_connections_per_client=table.integer(
            "max_connections_per_client", d.max_connections_per_client
        ),
        max_json_depth=_max_json_depth(table, d.max_json_depth),
        max_messages=table.integer("max_messages", d.max_messages, minimum=1),
        api_keys=tuple(keys),
        admin_api_key=_admin_key(table, env, keys),
        log_level=table.get("log_level", str, d.log_level),
        log_format=table.get("log_format", str, d.log_format),
        num_workers=_num_workers(table, d.num_workers),
        upstream_client=table.get("upstream_client", str, d.upstream_client),
    )
    if config.log_format not in LOG_FORMATS:
        raise table.error(
            "log_format", f"expected one of {', '.join(LOG_FORMATS)}, got {config.log_format!r}"
        )
    if config.upstream_client not in UPSTREAM_CLIENTS:
        raise table.error(
            "upstream_client",
            f"expected one of {', '.join(UPSTREAM_CLIENTS)}, got {config.upstream_client!r}",
        )
    table.finish()
    return config


def _num_workers(table: TomlTable, default: int) -> int:
    value = table.integer("workers", default, minimum=1)
    if value > MAX_NUM_WORKERS:
        raise table.error("workers", f"must be <= {MAX_NUM_WORKERS}, got {value}")
    return value


def _admin_key(table: TomlTable, env: Mapping[str, str], keys: list[TenantKey]) -> str | None:
    """The admin key from ``admin_api_key_env`` (default HASTEN_ADMIN_API_KEY, optional)."""
    env_name = table.get("admin_api_key_env", str, None)
    where = table.where("admin_api_key_env")
    if env_name is None:
        env_name, where = DEFAULT_ADMIN_KEY_ENV, f"{where} (default {DEFAULT_ADMIN_KEY_ENV})"
        value = env.get(env_name) or None
    else:
        value = env.get(env_name) or None
        if value is None:
            raise ConfigError(
                f"{where}: environment variable {env_name} for the admin key is not set"
            )
    if value is not None and any(key.key == value for key in keys):
        raise ConfigError(f"{where}: the admin key must differ from every tenant key")
    return value


def _max_json_depth(table: TomlTable, default: int) -> int:
    depth = table.integer("max_json_depth", default, minimum=1)
    if depth > MAX_JSON_DEPTH_LIMIT:
        raise table.error("max_json_depth", f"must be <= {MAX_JSON_DEPTH_LIMIT}, got {depth}")
    return depth


def _tenant_policies(
    table: TomlTable, keys: tuple[TenantKey, ...], *, has_virtual_keys: bool = False
) -> dict[str, ParamPolicy]:
    """``[tenants.<name>.policy]``; ``<name>`` must be a tenant some gateway key names (any
    name with virtual keys: their tenants are named at run time)."""
    known = sorted({key.tenant for key in keys})
    policies = {}
    for name in table.data:
        tenant_table = table.table(name)
        if not known and not has_virtual_keys:
            raise tenant_table.error(None, "tenant policies need gateway keys ([server] api_keys)")
        if name not in known and not has_virtual_keys:
            raise tenant_table.error(
                None, f"no gateway key names tenant {name!r} (known: {', '.join(known)})"
            )
        policies[name] = parse_policy(tenant_table.table("policy"))
        tenant_table.finish()
    return policies


def parse_config(data: Mapping[str, Any], env: Mapping[str, str]) -> GatewayConfig:
    """Validates a parsed TOML document; raises ConfigError naming the offending key."""
    root = TomlTable(data, "")
    server = _server(root.table("server"), env)
    cache = _cache(root.table("cache"))
    upstream_tables = root.table("upstreams")
    upstreams = {
        name: _upstream(name, upstream_tables.table(name), env) for name in upstream_tables.data
    }
    upstream_tables.seen.update(upstream_tables.data)
    model_tables = root.table("models")
    models = {
        name: _route(name, model_tables.table(name), upstreams, cache) for name in model_tables.data
    }
    if upstreams and not models:
        raise model_tables.error(None, 'no model routes; add e.g. [models."*"] upstream = "..."')
    alias_table = root.table("aliases")
    aliases = dict(alias_table.data)
    for alias, target in aliases.items():
        if not isinstance(target, str):
            raise alias_table.error(alias, "expected a model name string")
        if target not in models and WILDCARD_MODEL not in models:
            raise alias_table.error(alias, f"points at unknown model {target!r}")
    # Both tables are read even when absent, so that a typo's message lists them as known.
    local_table, hybrid_table = root.table("local"), root.table("hybrid")
    local = parse_local(local_table) if "local" in data else None
    hybrid = None
    if "hybrid" in data:
        hybrid = parse_hybrid(hybrid_table, known_models=models)
        if hybrid.policy != "cloud-only" and local is None:
            local = LocalServerConfig()  # a hybrid route needs the local engine running
    semantic = parse_semantic(root.table("semantic"))
    telemetry = parse_telemetry(root.table("telemetry"))
    metrics = parse_metrics(root.table("metrics"))
    fleet = parse_fleet(root.table("fleet"))
    static_ids = tuple(key.key_id for key in server.api_keys)
    keys = parse_keys(root.table("keys"), fleet, static_ids, server.num_workers)
    tenant_policies = _tenant_policies(
        root.table("tenants"), server.api_keys, has_virtual_keys=keys.is_enabled
    )
    prices = parse_prices(root.table("prices"))  # what budgets charge (hasten.limits)
    limits = parse_limits(root.table("limits"))
    responses = parse_responses(root.table("responses"), fleet)
    root.finish()
    return GatewayConfig(
        semantic=semantic,
        telemetry=telemetry,
        metrics=metrics,
        fleet=fleet,
        keys=keys,
        prices=prices,
        limits=limits,
        responses=responses,
        server=server,
        upstreams=upstreams,
        models=models,
        aliases=aliases,
        cache=cache,
        local=local,
        hybrid=hybrid,
        tenant_policies=tenant_policies,
    )


def load_config(path: str | os.PathLike[str] | None, env: Mapping[str, str]) -> GatewayConfig:
    """Loads a TOML file (or the embedded defaults when ``path`` is None)."""
    if path is None:
        return parse_config({}, env)
    return parse_config(read_toml_file(path).data, env)


def with_upstream(config: GatewayConfig, url: str, api_key: str | None) -> GatewayConfig:
    """Fronts one upstream for every model name (``hasten serve --upstream URL``)."""
    upstream = UpstreamConfig(name="default", url=check_url(url, "--upstream"), api_key=api_key)
    upstreams = {**config.upstreams, "default": upstream}
    models = {**config.models, WILDCARD_MODEL: ModelRoute(name=WILDCARD_MODEL, upstream="default")}
    return replace(config, upstreams=upstreams, models=models)

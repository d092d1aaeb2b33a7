"""Unit tests for hasten.config: TOML parsing, defaults, precise errors, secret hygiene."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hasten.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    WILDCARD_MODEL,
    CacheConfig,
    GatewayConfig,
    ModelRoute,
    RetryConfig,
    ServerConfig,
    TenantKey,
    TimeoutConfig,
    UpstreamConfig,
    check_cache,
    load_config,
    parse_config,
    with_upstream,
)
from hasten.config.cache_policy import ModelCachePolicy
from hasten.errors import ConfigError

SECRET = "sk-very-secret-upstream-key-123"
GATEWAY_SECRET = "gw-very-secret-tenant-key-456"

MINIMAL = """
[upstreams.a]
url = "https://api.example.com/v1/"
api_key_env = "A_KEY"

[models."*"]
upstream = "a"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hasten.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> GatewayConfig:
    return load_config(_write(tmp_path, text), env if env is not None else {"A_KEY": SECRET})


def _error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text, env)
    return str(info.value)


# --- defaults -------------------------------------------------------------------------------


def test_no_path_gives_defaults() -> None:
    config = load_config(None, {})
    assert config == GatewayConfig()
    assert config.server.host == DEFAULT_HOST == "127.0.0.1"
    assert config.server.port == DEFAULT_PORT == 8080
    assert config.server.api_keys == ()
    assert config.upstreams == {}
    assert config.models == {}
    assert config.aliases == {}
    assert config.cache == CacheConfig()
    assert config.cache.backend == "sqlite"
    assert config.cache.is_enabled is True
    assert config.is_simulated is True


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}) == GatewayConfig()


def test_upstream_defaults_and_url_normalised(tmp_path: Path) -> None:
    config = _load(tmp_path, MINIMAL)
    upstream = config.upstreams["a"]
    assert upstream.name == "a"
    assert upstream.url == "https://api.example.com/v1"  # trailing slash stripped
    assert upstream.api_key == SECRET
    assert upstream.timeouts == TimeoutConfig()
    assert upstream.retry == RetryConfig()
    assert upstream.max_connections == 256
    assert upstream.has_stream_options is True
    assert config.is_simulated is False
    route = config.models[WILDCARD_MODEL]
    assert route == ModelRoute(name="*", upstream="a")
    assert route.cache is None


def test_full_file(tmp_path: Path) -> None:
    text = """
[server]
host = "0.0.0.0"
port = 9000
max_body_bytes = 1024
log_level = "debug"
api_keys = [
  { tenant = "team-a", api_key_env = "GW_KEY" },
  { tenant = "team-b", api_key = "literal-key" },
]

[cache]
enabled = false
backend = "memory"
ttl_s = 60
deterministic_only = false
replay = "paced"
replay_chunk_interval_ms = 5
shared_across_tenants = true
l1_max_bytes = 0

[upstreams.a]
url = "http://a.local/v1"
api_key_env = "A_KEY"
connect_timeout_s = 1.5
first_byte_timeout_s = 2
idle_timeout_s = 3
total_timeout_s = 4
max_retries = 0
backoff_base_s = 0.1
backoff_max_s = 1
max_retry_after_s = 5
max_connections = 8

[upstreams.b]
url = "https://b.local"

[models.gpt]
upstream = "a"
fallbacks = ["b"]
upstream_model = "gpt-real"
cache = { enabled = false, ttl_s = 10 }

[models."*"]
upstream = "b"

[aliases]
fast = "gpt"
"""
    config = _load(tmp_path, text, {"A_KEY": SECRET, "GW_KEY": GATEWAY_SECRET})
    assert config.server == ServerConfig(
        host="0.0.0.0",
        port=9000,
        max_body_bytes=1024,
        api_keys=(
            TenantKey(tenant="team-a", key=GATEWAY_SECRET),
            TenantKey(tenant="team-b", key="literal-key"),
        ),
        log_level="debug",
    )
    assert config.cache == CacheConfig(
        is_enabled=False,
        backend="memory",
        ttl_s=60.0,
        is_deterministic_only=False,
        replay="paced",
        replay_chunk_interval_ms=5.0,
        is_shared_across_tenants=True,
        l1_max_bytes=0,
    )
    a = config.upstreams["a"]
    assert a.timeouts == TimeoutConfig(connect_s=1.5, first_byte_s=2.0, idle_s=3.0, total_s=4.0)
    assert a.retry == RetryConfig(
        max_retries=0, backoff_base_s=0.1, backoff_max_s=1.0, max_retry_after_s=5.0
    )
    assert a.max_connections == 8
    assert isinstance(a.timeouts.first_byte_s, float)
    b = config.upstreams["b"]
    assert b.api_key is None
    assert b.url == "https://b.local"
    gpt = config.models["gpt"]
    assert gpt.upstream == "a"
    assert gpt.fallbacks == ("b",)
    assert gpt.upstream_model == "gpt-real"
    # Unset per-model cache keys inherit from [cache].
    assert gpt.cache == ModelCachePolicy(is_enabled=False, is_deterministic_only=False, ttl_s=10.0)
    assert config.models["*"].fallbacks == ()
    assert dict(config.aliases) == {"fast": "gpt"}


def test_model_cache_inherits_cache_table(tmp_path: Path) -> None:
    text = MINIMAL + '\n[models.m]\nupstream = "a"\ncache = {}\n[cache]\nttl_s = 42\n'
    policy = _load(tmp_path, text).models["m"].cache
    assert policy == ModelCachePolicy(is_enabled=True, is_deterministic_only=True, ttl_s=42.0)


def test_parse_config_accepts_mapping_directly() -> None:
    data: dict[str, Any] = {
        "upstreams": {"a": {"url": "http://x", "api_key_env": "K"}},
        "models": {"m": {"upstream": "a"}},
    }
    config = parse_config(data, {"K": "v"})
    assert config.upstreams["a"].api_key == "v"


# --- secrets --------------------------------------------------------------------------------


def test_api_key_env_missing_names_variable(tmp_path: Path) -> None:
    message = _error(tmp_path, MINIMAL, {})
    assert "A_KEY" in message
    assert "upstreams.a.api_key_env" in message


def test_api_key_env_empty_counts_as_missing(tmp_path: Path) -> None:
    assert "A_KEY" in _error(tmp_path, MINIMAL, {"A_KEY": ""})


def test_api_key_env_not_read_from_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A_KEY", "from-os-environ")
    # Only the mapping passed in counts.
    assert "A_KEY" in _error(tmp_path, MINIMAL, {})


def test_api_key_and_api_key_env_both_set(tmp_path: Path) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\napi_key = "x"')
    message = _error(tmp_path, text)
    assert "upstreams.a" in message
    assert "not both" in message


def test_gateway_key_env_missing_names_variable(tmp_path: Path) -> None:
    text = '[server]\napi_keys = [{ tenant = "t", api_key_env = "GW_KEY" }]\n'
    message = _error(tmp_path, text, {})
    assert "GW_KEY" in message
    assert "server.api_keys[0]" in message


def test_gateway_key_needs_tenant_and_key(tmp_path: Path) -> None:
    assert "server.api_keys[0]" in _error(tmp_path, '[server]\napi_keys = [{ tenant = "t" }]\n')
    assert "server.api_keys[0]" in _error(tmp_path, '[server]\napi_keys = [{ api_key = "k" }]\n')
    assert "server.api_keys[1]" in _error(
        tmp_path, '[server]\napi_keys = [{ tenant = "t", api_key = "k" }, "bare"]\n'
    )


def test_secrets_not_in_repr(tmp_path: Path) -> None:
    text = MINIMAL + '[server]\napi_keys = [{ tenant = "team-a", api_key_env = "GW_KEY" }]\n'
    config = _load(tmp_path, text, {"A_KEY": SECRET, "GW_KEY": GATEWAY_SECRET})
    assert config.upstreams["a"].api_key == SECRET
    assert config.server.api_keys[0].key == GATEWAY_SECRET
    for obj in (
        config,
        config.server,
        config.server.api_keys,
        config.server.api_keys[0],
        config.upstreams,
        config.upstreams["a"],
    ):
        assert SECRET not in repr(obj)
        assert GATEWAY_SECRET not in repr(obj)
        assert SECRET not in str(obj)
        assert GATEWAY_SECRET not in str(obj)
    assert "team-a" in repr(config.server)  # the tenant name itself is not secret


def test_upstream_without_stream_options(tmp_path: Path) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nstream_options = false')
    assert _load(tmp_path, text).upstreams["a"].has_stream_options is False


def test_upstream_stream_upstream_is_on_unless_turned_off(tmp_path: Path) -> None:
    assert _load(tmp_path, MINIMAL).upstreams["a"].is_stream_upstream is True
    text = MINIMAL.replace(
        'api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nstream_upstream = false'
    )
    assert _load(tmp_path, text).upstreams["a"].is_stream_upstream is False


def test_the_bounds_of_issue_41_are_settings_with_defaults(tmp_path: Path) -> None:
    defaults = _load(tmp_path, MINIMAL)
    assert defaults.upstreams["a"].max_answer_bytes == 64 * 1024 * 1024
    assert defaults.server.max_messages == 100_000
    assert defaults.cache.sqlite_max_bytes == 1024 * 1024 * 1024
    assert defaults.limits.default_max_output_tokens == 4096
    text = MINIMAL.replace(
        'api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nmax_answer_bytes = 1048576'
    )
    text += (
        "\n[server]\nmax_messages = 50\n[cache]\nsqlite_max_bytes = 4096\n"
        "[limits]\ndefault_max_output_tokens = 256\n"
    )
    config = _load(tmp_path, text)
    assert config.upstreams["a"].max_answer_bytes == 1048576
    assert (config.server.max_messages, config.cache.sqlite_max_bytes) == (50, 4096)
    assert config.limits.default_max_output_tokens == 256
    too_small = MINIMAL.replace(
        'api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nmax_answer_bytes = 10'
    )
    assert "max_answer_bytes: must be >= 65536" in _error(tmp_path, too_small)
    assert "limits.default_max_output_tokens" in _error(
        tmp_path, MINIMAL + "\n[limits]\ndefault_max_output_tokens = 0\n"
    )


def test_with_upstream_keeps_secret_out_of_repr() -> None:
    config = with_upstream(GatewayConfig(), "https://api.example.com/v1/", SECRET)
    assert config.upstreams["default"].api_key == SECRET
    assert config.upstreams["default"].url == "https://api.example.com/v1"
    assert config.models[WILDCARD_MODEL] == ModelRoute(name="*", upstream="default")
    assert SECRET not in repr(config)


def test_with_upstream_rejects_bad_url() -> None:
    with pytest.raises(ConfigError, match="--upstream"):
        with_upstream(GatewayConfig(), "api.example.com", None)


# --- unknown keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "known"),
    [
        (
            "bogus = 1\n",
            "bogus",
            "aliases, cache, fleet, hybrid, keys, limits, local, metrics, models, prices, "
            "responses, semantic, server",
        ),
        ("[server]\nhots = 'x'\n", "server.hots", "host"),
        ("[cache]\nbakend = 'memory'\n", "cache.bakend", "backend"),
        (
            MINIMAL + "\n[upstreams.b]\nurl = 'http://b'\ntimeout = 3\n",
            "upstreams.b.timeout",
            "url",
        ),
        (
            MINIMAL + "\n[models.m]\nupstream = 'a'\nfallback = ['a']\n",
            "models.m.fallback",
            "fallbacks",
        ),
        (
            MINIMAL + "\n[models.m]\nupstream = 'a'\ncache = { ttl = 3 }\n",
            "models.m.cache.ttl",
            "ttl_s",
        ),
        (
            "[server]\napi_keys = [{ tenant = 't', api_key = 'k', role = 'x' }]\n",
            "server.api_keys[0].role",
            "api_key, api_key_env, budget_period, budget_period_s, budget_usd, id, max_concurrent",
        ),
    ],
)
def test_unknown_key_names_key_and_table(tmp_path: Path, text: str, path: str, known: str) -> None:
    message = _error(tmp_path, text)
    assert message.startswith(f"{path}: unknown key (known: "), message
    assert known in message


# --- wrong types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("snippet", "path"),
    [
        ('connect_timeout_s = "5"', "upstreams.a.connect_timeout_s"),
        ("connect_timeout_s = true", "upstreams.a.connect_timeout_s"),
        ("total_timeout_s = false", "upstreams.a.total_timeout_s"),
        ("max_retries = 1.5", "upstreams.a.max_retries"),
        ("max_retries = true", "upstreams.a.max_retries"),
        ('max_connections = "8"', "upstreams.a.max_connections"),
        ('stream_options = "no"', "upstreams.a.stream_options"),
        ("url = 5", "upstreams.a.url"),
    ],
)
def test_wrong_type_in_upstream_names_dotted_path(tmp_path: Path, snippet: str, path: str) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', f'api_key_env = "A_KEY"\n{snippet}')
    if snippet.startswith("url"):
        text = MINIMAL.replace('url = "https://api.example.com/v1/"', snippet)
    message = _error(tmp_path, text)
    assert message.startswith(f"{path}:"), message
    assert "expected" in message


def test_bool_for_number_message(tmp_path: Path) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nidle_timeout_s = true')
    message = _error(tmp_path, text)
    assert message == "upstreams.a.idle_timeout_s: expected an integer or a number, got bool True"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('[server]\nport = "8080"\n', "server.port"),
        ("[server]\nport = true\n", "server.port"),
        ("[server]\nhost = 1\n", "server.host"),
        ("[server]\napi_keys = 'k'\n", "server.api_keys"),
        ('[cache]\nenabled = "yes"\n', "cache.enabled"),
        ("[cache]\nenabled = 1\n", "cache.enabled"),
        ('[cache]\nttl_s = "1h"\n', "cache.ttl_s"),
        ("[cache]\nl1_max_bytes = true\n", "cache.l1_max_bytes"),
        ("server = 1\n", "server"),
        ("upstreams = 1\n", "upstreams"),
        ("[upstreams]\na = 1\n", "upstreams.a"),
        ("aliases = 1\n", "aliases"),
    ],
)
def test_wrong_type_names_dotted_path(tmp_path: Path, text: str, path: str) -> None:
    message = _error(tmp_path, text)
    assert message.startswith(f"{path}:"), message
    assert "expected" in message


@pytest.mark.parametrize(
    ("snippet", "path"),
    [
        ("connect_timeout_s = 0", "upstreams.a.connect_timeout_s"),
        ("connect_timeout_s = -1", "upstreams.a.connect_timeout_s"),
        ("max_retries = -1", "upstreams.a.max_retries"),
        ("max_connections = 0", "upstreams.a.max_connections"),
    ],
)
def test_out_of_range_names_dotted_path(tmp_path: Path, snippet: str, path: str) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', f'api_key_env = "A_KEY"\n{snippet}')
    assert _error(tmp_path, text).startswith(f"{path}: must be")


def test_zero_retries_allowed(tmp_path: Path) -> None:
    text = MINIMAL.replace('api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nmax_retries = 0')
    assert _load(tmp_path, text).upstreams["a"].retry.max_retries == 0


def test_port_negative_rejected(tmp_path: Path) -> None:
    assert _error(tmp_path, "[server]\nport = -1\n").startswith("server.port:")


def test_bad_upstream_url(tmp_path: Path) -> None:
    text = MINIMAL.replace("https://api.example.com/v1/", "ftp://x")
    message = _error(tmp_path, text)
    assert message.startswith("upstreams.a.url:")
    assert "ftp://x" in message


def test_upstream_without_url(tmp_path: Path) -> None:
    message = _error(tmp_path, '[upstreams.a]\napi_key = "k"\n[models."*"]\nupstream = "a"\n')
    assert "upstreams.a" in message
    assert "'url'" in message


# --- routes and aliases ---------------------------------------------------------------------


def test_route_to_unknown_upstream(tmp_path: Path) -> None:
    text = MINIMAL + '\n[models.m]\nupstream = "nope"\n'
    message = _error(tmp_path, text)
    assert message.startswith("models.m.upstream:")
    assert "'nope'" in message
    assert "known: a" in message


def test_route_fallback_to_unknown_upstream(tmp_path: Path) -> None:
    text = MINIMAL + '\n[upstreams.b]\nurl = "http://b"\n[models.m]\nupstream = "a"\n'
    text += 'fallbacks = ["b", "ghost"]\n'
    message = _error(tmp_path, text)
    assert message.startswith("models.m.fallbacks[1]:")
    assert "'ghost'" in message


def test_route_fallback_not_a_string(tmp_path: Path) -> None:
    text = MINIMAL + '\n[models.m]\nupstream = "a"\nfallbacks = [1]\n'
    assert _error(tmp_path, text).startswith("models.m.fallbacks[0]:")


def test_route_without_upstream(tmp_path: Path) -> None:
    text = MINIMAL + '\n[models.m]\nupstream_model = "x"\n'
    message = _error(tmp_path, text)
    assert "models.m" in message
    assert "'upstream'" in message


def test_upstreams_without_models(tmp_path: Path) -> None:
    text = '[upstreams.a]\nurl = "http://a"\n'
    assert _error(tmp_path, text).startswith("models:")


def test_route_without_upstreams_configured(tmp_path: Path) -> None:
    message = _error(tmp_path, '[models.m]\nupstream = "a"\n')
    assert message.startswith("models.m.upstream:")
    assert "known: none" in message


def test_alias_to_unknown_model(tmp_path: Path) -> None:
    text = """
[upstreams.a]
url = "http://a"
[models.gpt]
upstream = "a"
[aliases]
fast = "missing"
"""
    message = _error(tmp_path, text)
    assert message.startswith("aliases.fast:")
    assert "'missing'" in message


def test_alias_to_any_model_allowed_with_wildcard(tmp_path: Path) -> None:
    text = MINIMAL + '\n[aliases]\nfast = "anything"\n'
    assert dict(_load(tmp_path, text).aliases) == {"fast": "anything"}


def test_alias_target_not_string(tmp_path: Path) -> None:
    text = MINIMAL + "\n[aliases]\nfast = 3\n"
    assert _error(tmp_path, text).startswith("aliases.fast:")


# --- cache backends -------------------------------------------------------------------------


def test_redis_backend_without_url(tmp_path: Path) -> None:
    message = _error(tmp_path, '[cache]\nbackend = "redis"\n')
    assert message.startswith("cache.redis_url:")
    assert "redis" in message


def test_redis_backend_with_non_redis_url(tmp_path: Path) -> None:
    text = '[cache]\nbackend = "redis"\nredis_url = "http://localhost:6379"\n'
    assert _error(tmp_path, text).startswith("cache.redis_url:")


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://h:1", "unix:///tmp/r.sock"])
def test_redis_backend_with_url(tmp_path: Path, url: str) -> None:
    config = _load(tmp_path, f'[cache]\nbackend = "redis"\nredis_url = "{url}"\n', {})
    assert config.cache.backend == "redis"
    assert config.cache.redis_url == url


def test_unknown_backend(tmp_path: Path) -> None:
    message = _error(tmp_path, '[cache]\nbackend = "memcached"\n')
    assert message.startswith("cache.backend:")
    assert "memcached" in message


def test_unknown_replay_mode(tmp_path: Path) -> None:
    assert _error(tmp_path, '[cache]\nreplay = "fast"\n').startswith("cache.replay:")


def test_check_cache_uses_given_location() -> None:
    with pytest.raises(ConfigError, match=r"^--flag\.redis_url:"):
        check_cache(CacheConfig(backend="redis"), "--flag")
    assert check_cache(CacheConfig()) == CacheConfig()


# --- files ----------------------------------------------------------------------------------


def test_invalid_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert str(path) in str(info.value)
    assert "invalid TOML" in str(info.value)


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b'[server]\nhost = "\xff"\n')
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path, {})


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="no such file"):
        load_config(path, {})


def test_load_config_accepts_str_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "[server]\nport = 1234\n")
    assert load_config(str(path), {}).server.port == 1234


def test_config_objects_are_frozen() -> None:
    config = GatewayConfig()
    with pytest.raises(AttributeError):
        config.server = ServerConfig()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        UpstreamConfig(name="a", url="http://a").api_key = "x"  # type: ignore[misc]


def test_max_json_depth_default_and_range(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}).server.max_json_depth == 64
    assert _load(tmp_path, "[server]\nmax_json_depth = 8\n", {}).server.max_json_depth == 8
    too_deep = _error(tmp_path, "[server]\nmax_json_depth = 201\n", {})
    assert too_deep == "server.max_json_depth: must be <= 200, got 201"
    assert _error(tmp_path, "[server]\nmax_json_depth = 0\n", {}).startswith(
        "server.max_json_depth: must be >= 1"
    )


def test_admin_key_from_default_or_named_variable(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}).server.admin_api_key is None
    assert _load(tmp_path, "", {"HASTEN_ADMIN_API_KEY": "adm"}).server.admin_api_key == "adm"
    named = '[server]\nadmin_api_key_env = "MY_ADMIN"\n'
    assert _load(tmp_path, named, {"MY_ADMIN": "adm2"}).server.admin_api_key == "adm2"
    assert _error(tmp_path, named, {}) == (
        "server.admin_api_key_env: environment variable MY_ADMIN for the admin key is not set"
    )
    config = _load(tmp_path, named, {"MY_ADMIN": "adm2-secret"})
    assert "adm2-secret" not in repr(config) and "adm2-secret" not in repr(config.server)


def test_admin_key_must_differ_from_tenant_keys(tmp_path: Path) -> None:
    text = '[server]\napi_keys = [{ tenant = "t", api_key_env = "GW" }]\n'
    message = _error(tmp_path, text, {"GW": "same", "HASTEN_ADMIN_API_KEY": "same"})
    assert message == (
        "server.admin_api_key_env (default HASTEN_ADMIN_API_KEY): "
        "the admin key must differ from every tenant key"
    )


def test_log_format_is_text_or_json(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}).server.log_format == "text"
    assert _load(tmp_path, '[server]\nlog_format = "json"\n', {}).server.log_format == "json"
    assert _error(tmp_path, '[server]\nlog_format = "xml"\n', {}) == (
        "server.log_format: expected one of text, json, got 'xml'"
    )


def test_stream_resume_is_off_by_default_and_prefill_is_none(tmp_path: Path) -> None:
    config = _load(tmp_path, MINIMAL)
    assert all(not route.is_resuming_streams for route in config.models.values())
    assert config.upstreams["a"].prefill == "none"


def test_resume_streams_and_prefill_are_read_and_checked(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'api_key_env = "A_KEY"', 'api_key_env = "A_KEY"\nprefill = "assistant_prefix"'
    ).replace('upstream = "a"', 'upstream = "a"\nresume_streams = true', 1)
    config = _load(tmp_path, text)
    assert config.upstreams["a"].prefill == "assistant_prefix"
    assert any(route.is_resuming_streams for route in config.models.values())
    with pytest.raises(ConfigError, match=r"prefill: expected one of none, continue_final"):
        _load(tmp_path, text.replace('"assistant_prefix"', '"vllm"'))
    with pytest.raises(ConfigError, match="resume_streams"):
        _load(tmp_path, text.replace("resume_streams = true", 'resume_streams = "yes"'))


def test_upstream_client_is_lean_or_aiohttp(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}).server.upstream_client == "lean"
    aiohttp = _load(tmp_path, '[server]\nupstream_client = "aiohttp"\n', {})
    assert aiohttp.server.upstream_client == "aiohttp"
    assert _error(tmp_path, '[server]\nupstream_client = "curl"\n', {}) == (
        "server.upstream_client: expected one of lean, aiohttp, got 'curl'"
    )


# --- the APIs an upstream speaks -----------------------------------------------------------


def test_an_upstream_speaks_what_its_host_says_unless_told() -> None:
    assert UpstreamConfig("a", "https://api.anthropic.com/v1").speaks == ("messages",)
    assert "responses" in UpstreamConfig("o", "https://api.openai.com/v1").speaks
    assert UpstreamConfig("l", "http://127.0.0.1:9/v1").speaks == (
        "chat",
        "completions",
        "embeddings",
    )


def test_api_and_auto_cache_control_are_read_and_checked(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[upstreams.a]\nurl = "http://127.0.0.1:9/v1"\napi = ["chat", "messages"]\n'
        'auto_cache_control = true\n[models."*"]\nupstream = "a"\n',
    )
    upstream = config.upstreams["a"]
    assert upstream.speaks == ("chat", "messages") and upstream.is_auto_cache_control
    route = '[models."*"]\nupstream = "a"\n'
    bad = '[upstreams.a]\nurl = "http://127.0.0.1:9/v1"\napi = ["grpc"]\n' + route
    assert "unknown API 'grpc'" in _error(tmp_path, bad)
    empty = '[upstreams.a]\nurl = "http://127.0.0.1:9/v1"\napi = []\n' + route
    assert "an empty list" in _error(tmp_path, empty)

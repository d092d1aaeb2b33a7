"""Unit tests for the ``hasten`` command line and ``hasten serve`` configuration resolution."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hasten.config import WILDCARD_MODEL, GatewayConfig
from hasten.errors import ConfigError
from hasten.server import run as server

SECRET = "sk-cli-test-secret-value-789"

VALID = """
[server]
port = 9100

[upstreams.openai]
url = "https://api.openai.com/v1"
api_key_env = "HASTEN_TEST_OPENAI_KEY"
max_retries = 3
connect_timeout_s = 2

[upstreams.backup]
url = "http://backup.local/v1"
stream_upstream = false

[models.gpt]
upstream = "openai"
fallbacks = ["backup"]

[models."*"]
upstream = "backup"

[aliases]
fast = "gpt"

[cache]
backend = "memory"
ttl_s = 60
"""


def _cli_main(argv: list[str]) -> int:
    # Imported lazily: hasten.cli pulls in the simulator and load generator.
    from hasten.cli import main

    return main(argv)


def _write(tmp_path: Path, text: str, name: str = "hasten.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- hasten check-config --------------------------------------------------------------------


def test_check_config_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HASTEN_TEST_OPENAI_KEY", SECRET)
    path = _write(tmp_path, VALID)
    assert _cli_main(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"{path}: OK" in out
    assert "upstream openai: https://api.openai.com/v1 (key set; retries 3" in out
    assert "connect 2s" in out
    assert "upstream backup: http://backup.local/v1 (no key" in out
    assert "non-stream requests asked as streams)" in out
    assert "non-stream requests asked whole)" in out  # backup: stream_upstream = false
    assert "model gpt: openai -> backup" in out
    assert "model *: backup" in out
    assert "alias fast = gpt" in out
    assert "cache: on, backend memory, ttl 60s" in out
    assert SECRET not in out
    assert SECRET not in err


def test_check_config_without_upstreams_mentions_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "")
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: OK" in out
    assert "simulator" in out


def test_check_config_describes_semantic_local_and_hybrid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[upstreams.cloud]\nurl = "http://127.0.0.1:9/v1"\n[models.big]\nupstream = "cloud"\n'
        '[local]\nn_ctx = 2048\nmodel_path = "/m.gguf"\n[hybrid]\ncloud_model = "big"\n'
        "[semantic]\nenabled = true\nmin_similarity = 0.93\n"
    )
    path = _write(tmp_path, text)
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "semantic cache: on, embedder e5, min similarity 0.93 (cosine override)" in out
    assert "local engine: /m.gguf, context 2048 tokens" in out
    assert "hybrid model auto: local-first, cloud model big" in out
    path = _write(tmp_path, text.replace("min_similarity = 0.93", "target_precision = 0.97"))
    assert _cli_main(["check-config", str(path)]) == 0
    assert "embedder e5, target precision 0.97 (calibrated)" in capsys.readouterr().out
    path = _write(tmp_path, text.replace("min_similarity = 0.93\n", 'judge = "upstream"\n'))
    assert _cli_main(["check-config", str(path)]) == 2
    assert "semantic.judge: unknown key" in capsys.readouterr().err
    path = _write(tmp_path, text.split("[local]")[0])
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "semantic" not in out and "local engine" not in out and "hybrid" not in out


def test_check_config_describes_hedging(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        '[upstreams.a]\nurl = "http://127.0.0.1:9/v1"\n[upstreams.b]\nurl = "http://127.0.0.1:8/v1"\n'
        '[models.m]\ndeployments = [{ upstream = "a" }, { upstream = "b" }]\n'
        "[models.m.routing.hedge]\nenabled = true\nbudget_burst = 10\n"
    )
    path = _write(tmp_path, text)
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hedging: up to 2, the first at a pooled TTFT quantile (>= p95, 50-2000 ms)" in out
    assert (
        "then a second as long later; budget 5% (a bucket of 10 hedges; since the start "
        "at most the larger of 10 and 5% of requests)"
    ) in out
    path = _write(
        tmp_path, text.replace("budget_burst = 10", "second_quantile = 0.8\nbudget_burst = 0")
    )
    assert _cli_main(["check-config", str(path)]) == 0
    assert "then a second p80 later; budget 5% (over 30s)" in capsys.readouterr().out
    path = _write(tmp_path, text.replace("budget_burst = 10", "max_hedges = 1"))
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hedging: up to 1," in out and "second" not in out


def test_check_config_describes_tracing_without_header_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[telemetry]\notlp_endpoint = "http://127.0.0.1:4318/v1/traces"\nsample_ratio = 0.25\n'
        f'[telemetry.headers]\nx-collector-key = "{SECRET}"\n'
    )
    path = _write(tmp_path, text)
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "tracing: OTLP/HTTP to http://127.0.0.1:4318/v1/traces, service hasten, "
        "sample ratio 0.25, headers x-collector-key"
    ) in out
    assert SECRET not in out
    assert _cli_main(["check-config", str(_write(tmp_path, ""))]) == 0
    assert "tracing" not in capsys.readouterr().out


def test_check_config_describes_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli_main(["check-config", str(_write(tmp_path, ""))]) == 0
    assert "metrics: GET /metrics on the gateway port, without a tenant label" in (
        capsys.readouterr().out
    )
    path = _write(tmp_path, "[metrics]\nport = 9464\ntenant_label = true\n")
    assert _cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "metrics: GET /metrics on the gateway port and on 127.0.0.1:9464, with a tenant" in out


def test_metrics_flags_override_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[metrics]\nport = 9464\n")
    config = server.resolve_config(_args("--config", str(path), "--metrics-port", "9100"), {})
    assert config.metrics.port == 9100 and config.metrics.is_enabled
    assert not server.resolve_config(_args("--no-metrics"), {}).metrics.is_enabled
    assert server.resolve_config(_args(), {}).metrics.port is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server\n", "invalid TOML"),
        ("bogus = 1\n", "bogus: unknown key (known: aliases, "),
        (
            '[upstreams.a]\nurl = "http://a"\nconnect_timeout_s = "5"\n'
            '[models."*"]\nupstream = "a"\n',
            "upstreams.a.connect_timeout_s",
        ),
        ('[cache]\nbackend = "redis"\n', "cache.redis_url"),
        (
            '[upstreams.a]\nurl = "http://a"\napi_key_env = "HASTEN_TEST_UNSET_VAR"\n',
            "HASTEN_TEST_UNSET_VAR",
        ),
        ("[semantic]\nenabld = true\n", "semantic.enabld: unknown key (known: "),
        ('[hybrid]\npolicy = "local-only"\nmodle = "x"\n', "hybrid.modle: unknown key (known: "),
        ("[local]\nn_thread = 2\n", "local.n_thread: unknown key (known: "),
        ('[telemetry]\notlp_endpoint = "127.0.0.1:4318"\n', "telemetry.otlp_endpoint: expected"),
    ],
)
def test_check_config_invalid(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    fragment: str,
) -> None:
    monkeypatch.delenv("HASTEN_TEST_UNSET_VAR", raising=False)
    path = _write(tmp_path, text)
    assert _cli_main(["check-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ")
    assert fragment in err
    assert "Traceback" not in err


def test_check_config_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli_main(["check-config", str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "no such file" in err


def test_check_config_requires_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _cli_main(["check-config"])
    assert info.value.code == 2


# --- hasten --help --------------------------------------------------------------------------


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _cli_main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("serve", "simulate", "bench", "doctor", "check-config"):
        assert command in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli_main([]) == 0
    assert "check-config" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from hasten import __version__

    with pytest.raises(SystemExit) as info:
        _cli_main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _cli_main(["frobnicate"])
    assert info.value.code == 2


# --- server.resolve_config ------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    return parser.parse_args(list(argv))


FILE = """
[server]
host = "10.0.0.1"
port = 9000

[cache]
backend = "memory"
sqlite_path = "from-file.sqlite3"
"""


def test_defaults_without_anything() -> None:
    config = server.resolve_config(_args(), {})
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8080
    assert config.cache.backend == "sqlite"
    assert config.cache.is_enabled
    assert config.is_simulated
    assert config == GatewayConfig()


def test_file_beats_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)
    config = server.resolve_config(_args("--config", str(path)), {})
    assert (config.server.host, config.server.port) == ("10.0.0.1", 9000)
    assert config.cache.backend == "memory"
    assert config.cache.sqlite_path == "from-file.sqlite3"


def test_config_path_from_env(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)
    config = server.resolve_config(_args(), {"HASTEN_CONFIG": str(path)})
    assert config.server.port == 9000


def test_config_flag_beats_env(tmp_path: Path) -> None:
    flag_path = _write(tmp_path, "[server]\nport = 1111\n", "flag.toml")
    env_path = _write(tmp_path, "[server]\nport = 2222\n", "env.toml")
    config = server.resolve_config(
        _args("--config", str(flag_path)), {"HASTEN_CONFIG": str(env_path)}
    )
    assert config.server.port == 1111


def test_env_beats_file(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)
    env = {
        "HASTEN_HOST": "0.0.0.0",
        "HASTEN_PORT": "9500",
        "HASTEN_CACHE_BACKEND": "sqlite",
        "HASTEN_SQLITE_PATH": "from-env.sqlite3",
    }
    config = server.resolve_config(_args("--config", str(path)), env)
    assert (config.server.host, config.server.port) == ("0.0.0.0", 9500)
    assert config.cache.backend == "sqlite"
    assert config.cache.sqlite_path == "from-env.sqlite3"


def test_flag_beats_env_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)
    env = {
        "HASTEN_HOST": "0.0.0.0",
        "HASTEN_PORT": "9500",
        "HASTEN_CACHE_BACKEND": "sqlite",
        "HASTEN_SQLITE_PATH": "from-env.sqlite3",
    }
    args = _args(
        "--config",
        str(path),
        "--host",
        "::1",
        "--port",
        "9999",
        "--cache-backend",
        "memory",
        "--sqlite-path",
        "from-flag.sqlite3",
        "--log-level",
        "debug",
    )
    config = server.resolve_config(args, env)
    assert (config.server.host, config.server.port) == ("::1", 9999)
    assert config.cache.backend == "memory"
    assert config.cache.sqlite_path == "from-flag.sqlite3"
    assert config.server.log_level == "debug"


def test_port_zero_flag_is_honoured(tmp_path: Path) -> None:
    # Port 0 asks the OS for a free port; it must not fall back to the file or default.
    path = _write(tmp_path, FILE)
    assert server.resolve_config(_args("--port", "0"), {}).server.port == 0
    assert server.resolve_config(_args("--config", str(path), "--port", "0"), {}).server.port == 0
    assert server.resolve_config(_args(), {"HASTEN_PORT": "0"}).server.port == 0


def test_bad_port_env_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="HASTEN_PORT"):
        server.resolve_config(_args(), {"HASTEN_PORT": "eighty"})


def test_port_flag_must_be_int(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _args("--port", "abc")


def test_redis_url_flag_implies_redis_backend(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)  # the file says memory
    args = _args("--config", str(path), "--redis-url", "redis://127.0.0.1:6379/0")
    config = server.resolve_config(args, {})
    assert config.cache.backend == "redis"
    assert config.cache.redis_url == "redis://127.0.0.1:6379/0"


def test_redis_url_env_implies_redis_backend() -> None:
    config = server.resolve_config(_args(), {"HASTEN_REDIS_URL": "redis://h:1"})
    assert config.cache.backend == "redis"
    assert config.cache.redis_url == "redis://h:1"


def test_explicit_backend_beats_implied_redis() -> None:
    args = _args("--redis-url", "redis://h:1", "--cache-backend", "memory")
    assert server.resolve_config(args, {}).cache.backend == "memory"


def test_redis_backend_without_url_is_config_error() -> None:
    with pytest.raises(ConfigError, match="redis"):
        server.resolve_config(_args("--cache-backend", "redis"), {})


def test_bad_backend_env_is_config_error() -> None:
    with pytest.raises(ConfigError, match="backend"):
        server.resolve_config(_args(), {"HASTEN_CACHE_BACKEND": "memcached"})


def test_cache_backend_choices_enforced() -> None:
    with pytest.raises(SystemExit):
        _args("--cache-backend", "memcached")


def test_no_cache_flag(tmp_path: Path) -> None:
    assert server.resolve_config(_args("--no-cache"), {}).cache.is_enabled is False
    path = _write(tmp_path, "[cache]\nenabled = false\n")
    # Without the flag the file still decides.
    assert server.resolve_config(_args("--config", str(path)), {}).cache.is_enabled is False
    assert server.resolve_config(_args(), {}).cache.is_enabled is True


def test_upstream_flag_fronts_every_model() -> None:
    args = _args("--upstream", "https://api.openai.com/v1/")
    env = {"HASTEN_UPSTREAM_API_KEY": SECRET, "OPENAI_API_KEY": "sk-other"}
    config = server.resolve_config(args, env)
    assert not config.is_simulated
    upstream = config.upstreams["default"]
    assert upstream.url == "https://api.openai.com/v1"
    assert upstream.api_key == SECRET
    assert config.models[WILDCARD_MODEL].upstream == "default"
    assert SECRET not in repr(config)


def test_upstream_key_falls_back_to_openai_api_key() -> None:
    args = _args("--upstream", "https://api.openai.com/v1")
    config = server.resolve_config(args, {"OPENAI_API_KEY": "sk-openai"})
    assert config.upstreams["default"].api_key == "sk-openai"
    config = server.resolve_config(
        args, {"HASTEN_UPSTREAM_API_KEY": "", "OPENAI_API_KEY": "sk-openai"}
    )
    assert config.upstreams["default"].api_key == "sk-openai"


def test_upstream_without_any_key() -> None:
    config = server.resolve_config(_args("--upstream", "http://localhost:8000/v1"), {})
    assert config.upstreams["default"].api_key is None


def test_upstream_from_env_and_flag_precedence() -> None:
    env = {"HASTEN_UPSTREAM": "http://from-env/v1"}
    assert server.resolve_config(_args(), env).upstreams["default"].url == "http://from-env/v1"
    config = server.resolve_config(_args("--upstream", "http://from-flag/v1"), env)
    assert config.upstreams["default"].url == "http://from-flag/v1"


def test_upstream_flag_overrides_file_wildcard(tmp_path: Path) -> None:
    text = """
[upstreams.a]
url = "http://a/v1"
[models.gpt]
upstream = "a"
[models."*"]
upstream = "a"
"""
    path = _write(tmp_path, text)
    config = server.resolve_config(_args("--config", str(path), "--upstream", "http://u/v1"), {})
    assert config.models[WILDCARD_MODEL].upstream == "default"
    assert config.models["gpt"].upstream == "a"  # explicit routes from the file stay
    assert set(config.upstreams) == {"a", "default"}


def test_bad_upstream_url_is_config_error() -> None:
    with pytest.raises(ConfigError, match="--upstream"):
        server.resolve_config(_args("--upstream", "api.openai.com"), {})


def test_resolve_config_reads_only_given_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HASTEN_PORT", "1234")
    monkeypatch.setenv("HASTEN_UPSTREAM", "http://leak/v1")
    config = server.resolve_config(_args(), {})
    assert config.server.port == 8080
    assert config.is_simulated


def test_port_out_of_range_is_config_error() -> None:
    with pytest.raises(ConfigError, match="65535"):
        server.resolve_config(_args("--port", "70000"), {})
    with pytest.raises(ConfigError, match="65535"):
        server.resolve_config(_args(), {"HASTEN_PORT": "-1"})


def test_serve_with_bad_config_exits_2_before_binding(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HASTEN_REDIS_URL", "HASTEN_CONFIG", "HASTEN_CACHE_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    assert _cli_main(["serve", "--cache-backend", "redis"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "redis" in err


def test_doctor_help_names_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _cli_main(["doctor", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--model", "--key-env", "--tries", "--max-tokens", "--timeout-s", "--json"):
        assert flag in out


def test_check_config_describes_stream_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HASTEN_TEST_OPENAI_KEY", SECRET)
    text = VALID.replace(
        'fallbacks = ["backup"]', 'fallbacks = ["backup"]\nresume_streams = true'
    ).replace("stream_upstream = false", 'stream_upstream = false\nprefill = "assistant_prefix"')
    assert _cli_main(["check-config", str(_write(tmp_path, text))]) == 0
    out = capsys.readouterr().out
    assert "upstream backup: http://backup.local/v1 (no key" in out
    assert "asked whole; prefill assistant_prefix)" in out
    assert (
        "    resume streams: deterministic requests regenerated on another deployment; "
        "otherwise prefill via backup"
    ) in out
    assert out.count("resume streams:") == 1  # model * keeps it off
    bad = text.replace('prefill = "assistant_prefix"', 'prefill = "magic"')
    assert _cli_main(["check-config", str(_write(tmp_path, bad))]) == 2
    assert "prefill: expected one of" in capsys.readouterr().err

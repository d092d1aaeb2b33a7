"""``[telemetry]``: tracing settings, and a clear error when the otel extra is missing."""

from __future__ import annotations

from typing import Any

import pytest

from hasten.config import parse_config
from hasten.config import telemetry as telemetry_config
from hasten.config.reader import TomlTable
from hasten.config.telemetry import TelemetryConfig, is_otel_installed, parse_telemetry
from hasten.errors import ConfigError

ENDPOINT = "http://127.0.0.1:4318/v1/traces"


def _parse(data: dict[str, Any]) -> TelemetryConfig:
    return parse_telemetry(TomlTable(data, "telemetry"))


def test_absent_table_leaves_tracing_off() -> None:
    config = parse_config({}, {}).telemetry
    assert config == TelemetryConfig() and not config.is_enabled


def test_every_key_is_read() -> None:
    config = _parse(
        {
            "otlp_endpoint": ENDPOINT,
            "service_name": "edge-gw",
            "sample_ratio": 0.5,
            "headers": {"x-api-key": "secret-value"},
            "max_queue_spans": 64,
            "export_timeout_s": 2,
            "export_interval_s": 0.5,
        }
    )
    assert config.is_enabled and config.otlp_endpoint == ENDPOINT
    assert config.service_name == "edge-gw" and config.sample_ratio == 0.5
    assert dict(config.headers) == {"x-api-key": "secret-value"}
    assert (config.max_queue_spans, config.export_timeout_s, config.export_interval_s) == (
        64,
        2.0,
        0.5,
    )
    assert "secret-value" not in repr(config)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"otlp_endpoint": "127.0.0.1:4318"}, "telemetry.otlp_endpoint: expected an http://"),
        ({"sample_ratio": 1.5}, "telemetry.sample_ratio: must be <= 1, got 1.5"),
        ({"sample_ratio": -0.1}, "telemetry.sample_ratio: must be >= 0"),
        ({"headers": {"x-key": 1}}, "telemetry.headers.x-key: expected a string"),
        ({"max_queue_spans": 0}, "telemetry.max_queue_spans: must be >= 1"),
        ({"export_timeout_s": 0}, "telemetry.export_timeout_s: must be > 0"),
    ],
)
def test_bad_values_name_their_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(data)
    assert str(info.value).startswith(message)


def test_the_extra_is_installed_here() -> None:
    assert is_otel_installed()


def test_an_endpoint_without_the_otel_extra_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real lookup, of modules that are not there (as without `pip install hasten[otel]`).
    monkeypatch.setattr(telemetry_config, "OTEL_MODULES", ("opentelemetry_absent.sdk",))
    assert not is_otel_installed()
    with pytest.raises(ConfigError) as info:
        parse_config({"telemetry": {"otlp_endpoint": ENDPOINT}}, {})
    assert str(info.value) == (
        "telemetry.otlp_endpoint: tracing needs the otel extra, which is not installed: "
        "pip install 'hasten[otel]'"
    )
    # Without an endpoint nothing needs the extra.
    assert not parse_config({"telemetry": {"service_name": "x"}}, {}).telemetry.is_enabled

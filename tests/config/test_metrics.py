"""The [metrics] table."""

from __future__ import annotations

import pytest

from hasten.config import parse_config
from hasten.config.metrics import MetricsConfig, describe_metrics
from hasten.errors import ConfigError


def test_defaults_serve_metrics_without_a_tenant_label() -> None:
    config = parse_config({}, {}).metrics
    assert config == MetricsConfig(is_enabled=True, port=None, host="127.0.0.1")
    assert describe_metrics(config) == (
        "metrics: GET /metrics on the gateway port, without a tenant label"
    )


def test_table_is_read() -> None:
    data = {"metrics": {"enabled": True, "port": 9464, "host": "0.0.0.0", "tenant_label": True}}
    config = parse_config(data, {}).metrics
    assert config == MetricsConfig(True, 9464, "0.0.0.0", True)
    assert "and on 0.0.0.0:9464, with a tenant label" in describe_metrics(config)
    off = parse_config({"metrics": {"enabled": False}}, {}).metrics
    assert describe_metrics(off) == "metrics: off"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"port": 0}, "metrics.port: must be between 1 and 65535"),
        ({"port": "9464"}, "metrics.port: expected"),
        ({"tenant_labels": True}, "metrics.tenant_labels: unknown key"),
    ],
)
def test_bad_values_name_their_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"metrics": table}, {})

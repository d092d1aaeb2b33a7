from __future__ import annotations

from pathlib import Path

import pytest

from hasten import cli
from hasten.config import parse_config
from hasten.config.prices import ModelPrice, price_of
from hasten.errors import ConfigError


def test_prices_parse_and_price_a_request() -> None:
    config = parse_config(
        {
            "prices": {
                "gpt-4o-mini": {"input_usd_per_1m_tokens": 0.15, "output_usd_per_1m_tokens": 0.6},
                "*": {"input_usd_per_1m_tokens": 1},
            }
        },
        {},
    )
    mini = config.prices["gpt-4o-mini"]
    assert mini.cost_usd(1_000_000, 500_000) == pytest.approx(0.45)
    assert price_of(config.prices, "alias", "gpt-4o-mini") is mini
    assert price_of(config.prices, "other") == ModelPrice(1.0, 0.0)
    assert price_of({}, "other") is None


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ({"m": {"input_usd_per_1m_tokens": -1}}, "prices.m.input_usd_per_1m_tokens: must be >= 0"),
        ({"m": {"input_usd": 1}}, "prices.m.input_usd: unknown key (known: input_usd_per_1m"),
        ({"m": {"output_usd_per_1m_tokens": "x"}}, "prices.m.output_usd_per_1m_tokens: expected"),
        ({"m": 3}, "prices.m: expected a table"),
    ],
)
def test_a_bad_price_is_a_config_error(table: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"prices": table}, {})
    assert str(raised.value).startswith(error)


def test_check_config_lists_prices_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[prices."gpt-4o-mini"]\ninput_usd_per_1m_tokens = 0.15\n')
    assert cli.main(["check-config", str(good)]) == 0
    assert "price gpt-4o-mini: $0.15 in, $0 out per 1M tokens" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text("[prices.m]\noutput_usd_per_1m_tokens = -1\n")
    assert cli.main(["check-config", str(bad)]) == 2
    assert "prices.m.output_usd_per_1m_tokens: must be >= 0" in capsys.readouterr().err

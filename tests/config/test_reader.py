"""The one TOML reader: its getters, and one message shape for every table's errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hasten.config import parse_config
from hasten.config.local import load_local_config
from hasten.config.reader import MAX_EXACT_FLOAT_INT, TomlTable, read_toml_file
from hasten.errors import ConfigError
from hasten.simulator.config import SimConfig, load_toml_config

CLOUD = {"upstreams": {"a": {"url": "http://a"}}, "models": {"m": {"upstream": "a"}}}
TENANT = {**CLOUD, "server": {"api_keys": [{"tenant": "t", "api_key": "k"}]}}


def _gateway_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, {})
    return str(info.value)


def _file_error(tmp_path: Path, text: str, load: Callable[[Path], object]) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load(path)
    return str(info.value)


def _sim_update_error(changes: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        SimConfig().updated(changes)
    return str(info.value)


# One typo per table: every reader names the key by its dotted path and lists the known keys.
TYPOS: list[tuple[str, Callable[[Path], str]]] = [
    ("server.prot", lambda _: _gateway_error({"server": {"prot": 1}})),
    ("cache.bakend", lambda _: _gateway_error({"cache": {"bakend": "memory"}})),
    (
        "upstreams.a.timeout",
        lambda _: _gateway_error({**CLOUD, "upstreams": {"a": {"url": "http://a", "timeout": 1}}}),
    ),
    (
        "models.m.fallback",
        lambda _: _gateway_error({**CLOUD, "models": {"m": {"upstream": "a", "fallback": []}}}),
    ),
    (
        "models.m.routing.hedge.quantil",
        lambda _: _gateway_error(
            {**CLOUD, "models": {"m": {"upstream": "a", "routing": {"hedge": {"quantil": 1}}}}}
        ),
    ),
    (
        "models.m.policy.max_token_cap",
        lambda _: _gateway_error(
            {**CLOUD, "models": {"m": {"upstream": "a", "policy": {"max_token_cap": 1}}}}
        ),
    ),
    (
        "tenants.t.policy.max_nn",
        lambda _: _gateway_error({**TENANT, "tenants": {"t": {"policy": {"max_nn": 1}}}}),
    ),
    ("semantic.enabld", lambda _: _gateway_error({"semantic": {"enabld": True}})),
    ("telemetry.otlp_endpont", lambda _: _gateway_error({"telemetry": {"otlp_endpont": "x"}})),
    ("hybrid.modle", lambda _: _gateway_error({**CLOUD, "hybrid": {"modle": "x"}})),
    ("local.n_thread", lambda _: _gateway_error({"local": {"n_thread": 2}})),
    ("local.n_thread", lambda p: _file_error(p, "[local]\nn_thread = 2\n", load_local_config)),
    ("simulator.rtt", lambda p: _file_error(p, "[simulator]\nrtt = 2\n", load_toml_config)),
    ("simulator.rtt", lambda _: _sim_update_error({"rtt": 2})),
]


@pytest.mark.parametrize(("path", "error"), TYPOS, ids=[path for path, _ in TYPOS])
def test_a_typo_in_any_table_has_the_same_message_shape(
    tmp_path: Path, path: str, error: Callable[[Path], str]
) -> None:
    message = error(tmp_path)
    assert re.fullmatch(rf"{re.escape(path)}: unknown key \(known: \w+(, \w+)+\)", message)


def test_a_typo_at_the_top_level_lists_every_table() -> None:
    message = _gateway_error({"bogus": 1})
    tables = (
        "aliases, cache, fleet, hybrid, keys, limits, local, metrics, models, prices, responses, "
        "semantic, server, telemetry, tenants, upstreams"
    )
    assert message == f"bogus: unknown key (known: {tables})"


# One wrong type per table: the same shape, naming what was expected and what was given.
WRONG_TYPES: list[tuple[str, Callable[[Path], str]]] = [
    ("server.port", lambda _: _gateway_error({"server": {"port": "x"}})),
    ("semantic.enabled", lambda _: _gateway_error({"semantic": {"enabled": "yes"}})),
    (
        "tenants.t.policy.max_n",
        lambda _: _gateway_error({**TENANT, "tenants": {"t": {"policy": {"max_n": "2"}}}}),
    ),
    ("telemetry.sample_ratio", lambda _: _gateway_error({"telemetry": {"sample_ratio": "x"}})),
    ("metrics.enabled", lambda _: _gateway_error({"metrics": {"enabled": "yes"}})),
    ("hybrid.policy", lambda _: _gateway_error({**CLOUD, "hybrid": {"policy": 1}})),
    ("local.n_ctx", lambda _: _gateway_error({"local": {"n_ctx": "big"}})),
    ("local.n_ctx", lambda p: _file_error(p, '[local]\nn_ctx = "big"\n', load_local_config)),
    ("simulator.rtt_ms", lambda p: _file_error(p, '[simulator]\nrtt_ms = "x"\n', load_toml_config)),
    ("simulator.seed", lambda _: _sim_update_error({"seed": 1.5})),
]


@pytest.mark.parametrize(("path", "error"), WRONG_TYPES, ids=[path for path, _ in WRONG_TYPES])
def test_a_wrong_type_in_any_table_has_the_same_message_shape(
    tmp_path: Path, path: str, error: Callable[[Path], str]
) -> None:
    assert re.fullmatch(rf"{re.escape(path)}: expected [a-z ]+, got \w+ .+", error(tmp_path))


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (lambda: _gateway_error({"semantic": {"min_similarity": 2}}), "semantic.min_similarity: "),
        (lambda: _gateway_error({"local": {"n_ctx": 8}}), "local.n_ctx: must be >= 64, got 8"),
        (lambda: _sim_update_error({"error_rate": 2}), "simulator.error_rate: must be within"),
        (lambda: _gateway_error({"hybrid": {"policy": "x"}}), "hybrid.policy: expected one of"),
    ],
)
def test_range_errors_have_the_same_shape(error: Callable[[], str], message: str) -> None:
    assert error().startswith(message)


# --- getters --------------------------------------------------------------------------------


def test_getters_return_values_or_defaults() -> None:
    table = TomlTable({"s": "x", "b": True, "n": 2, "l": ["a", "b"], "c": "lfu"}, "t")
    assert table.string("s", "d") == "x" and table.string("missing", "d") == "d"
    assert table.boolean("b", False) is True
    assert table.real("n", 0.0) == 2.0 and isinstance(table.real("n", 0.0), float)
    assert table.optional_real("missing") is None and table.optional_real("n") == 2.0
    assert table.strings("l", ()) == ("a", "b") and table.strings("missing", ("z",)) == ("z",)
    assert table.choice("c", "lru", ("lru", "lfu")) == "lfu"
    assert table.optional_string("missing") is None
    table.finish()


@pytest.mark.parametrize(
    ("read", "message"),
    [
        (lambda t: t.strings("l", ()), "t.l[1]: expected a string, got 3"),
        (lambda t: t.real("big", 0.0), f"t.big: out of range: {MAX_EXACT_FLOAT_INT + 1}"),
        (lambda t: t.real("b", 0.0), "t.b: expected an integer or a number, got bool True"),
        (lambda t: t.choice("s", "lru", ("lru", "lfu")), "t.s: expected one of lru, lfu, got 'x'"),
        (lambda t: t.integer("n", 0, minimum=5), "t.n: must be >= 5, got 2"),
        (lambda t: t.number("zero_s", 1.0), "t.zero_s: must be > 0, got 0"),
        (lambda t: t.table("s"), "t.s: expected a table, got str 'x'"),
    ],
)
def test_getter_errors_name_the_dotted_path(
    read: Callable[[TomlTable], object], message: str
) -> None:
    data = {"l": ["a", 3], "big": MAX_EXACT_FLOAT_INT + 1, "b": True, "s": "x", "n": 2, "zero_s": 0}
    with pytest.raises(ConfigError) as info:
        read(TomlTable(data, "t"))
    assert str(info.value) == message


def test_finish_with_nothing_read_lists_no_known_keys() -> None:
    with pytest.raises(ConfigError, match=r"^t\.x: unknown key \(known: none\)$"):
        TomlTable({"x": 1}, "t").finish()


def test_read_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[a]\nb = 1\n", encoding="utf-8")
    assert read_toml_file(path).table("a").data == {"b": 1}
    with pytest.raises(ConfigError, match="no such file"):
        read_toml_file(tmp_path / "missing.toml")
    path.write_text("[a\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid TOML"):
        read_toml_file(path)

"""The policy tables as `hasten check-config` reads them: shapes, precise errors, description."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hasten.cli import main
from hasten.config import GatewayConfig, parse_config
from hasten.errors import ConfigError
from hasten.policy import ParamPolicy

BASE = """
[server]
api_keys = [{ tenant = "batch", api_key = "k1" }, { tenant = "web", api_key = "k2" }]
[upstreams.sim]
url = "http://127.0.0.1:9/v1"
[models."*"]
upstream = "sim"
"""


def parsed(extra: str, base: str = BASE) -> GatewayConfig:
    return parse_config(tomllib.loads(base + extra), {})


def refused(extra: str, base: str = BASE) -> str:
    with pytest.raises(ConfigError) as error:
        parsed(extra, base)
    return str(error.value)


def test_model_and_tenant_policies_are_read() -> None:
    config = parsed(
        """
[models."*".policy]
default_max_tokens = 256
max_tokens_cap = 1024
max_n = 2
default_stop = "\\n\\n"
drop = ["logit_bias", "logit_bias"]
set = { temperature = 0, metadata = { team = "x" } }
[tenants.batch.policy]
max_tokens_cap = 128
on_exceed = "reject"
"""
    )
    assert config.models["*"].policy == ParamPolicy(
        default_max_tokens=256,
        max_tokens_cap=1024,
        max_n=2,
        default_stop=("\n\n",),
        drop=("logit_bias",),
        set_fields={"temperature": 0, "metadata": {"team": "x"}},
    )
    assert config.tenant_policies == {
        "batch": ParamPolicy(max_tokens_cap=128, is_reject_on_exceed=True)
    }


def test_no_policy_table_means_no_policy() -> None:
    config = parsed("")
    assert config.models["*"].policy is None and config.tenant_policies == {}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("set = { model = 'x' }", "models.*.policy.set.model: 'model' cannot be dropped or set"),
        ("set = { stream = true }", "models.*.policy.set.stream: 'stream' cannot be"),
        ("set = { messages = [] }", "models.*.policy.set.messages: 'messages' cannot be"),
        ("drop = ['prompt']", "models.*.policy.drop[0]: 'prompt' cannot be dropped or set"),
        ("drop = ['user', 'input']", "models.*.policy.drop[1]: 'input' cannot be"),
        ("set = { max_tokens = 5 }", "set.max_tokens: 'max_tokens' has its own setting: use"),
        ("drop = ['n']", "drop[0]: 'n' has its own setting: use max_n"),
        ("max_tokens_cap = '1024'", "max_tokens_cap: expected an integer, got str '1024'"),
        ("max_tokens_cap = 0", "models.*.policy.max_tokens_cap: must be >= 1, got 0"),
        ("max_n = true", "models.*.policy.max_n: expected an integer, got bool True"),
        ("default_max_tokens = 1.5", "default_max_tokens: expected an integer, got float"),
        ("on_exceed = 'warn'", "on_exceed: expected one of clamp, reject, got 'warn'"),
        ("default_stop = ['a', 'b', 'c', 'd', 'e']", "default_stop: expected 1 to 4 non-empty"),
        ("default_stop = ['']", "default_stop: expected 1 to 4 non-empty strings"),
        ("default_stop = [1]", "default_stop[0]: expected a string, got 1"),
        ("drop = 'user'", "models.*.policy.drop: expected a list, got str"),
        ("set = 'x'", "models.*.policy.set: expected a table, got str"),
        ("set = { when = 2024-01-01 }", "set.when: a date or time is not a JSON value"),
        ("set = { t = nan }", "models.*.policy.set.t: nan is not a JSON number"),
        ("set = { deep = { x = [inf] } }", "set.deep.x[0]: inf is not a JSON number"),
        ("drop = ['user']\nset = { user = 'x' }", "drop: 'user' is both dropped and set"),
        ("default_max_tokens = 2000\nmax_tokens_cap = 10", "2000 is above max_tokens_cap 10"),
        ("max_token_cap = 10", "models.*.policy.max_token_cap: unknown key (known: default_"),
    ],
)
def test_model_policy_errors_name_the_key(extra: str, message: str) -> None:
    assert message in refused('[models."*".policy]\n' + extra + "\n")


def test_tenant_policies_name_known_tenants() -> None:
    assert "tenants.nobody: no gateway key names tenant 'nobody' (known: batch, web)" in refused(
        "[tenants.nobody.policy]\nmax_n = 1\n"
    )
    assert "tenants.batch.limits: unknown key (known: policy)" in refused(
        "[tenants.batch.limits]\nx = 1\n"
    )
    assert "tenants.batch.policy.set.input" in refused("[tenants.batch.policy]\nset = {input=1}\n")
    without_keys = BASE.split("\n", 3)[3]  # no [server] api_keys
    assert "tenants.batch: tenant policies need gateway keys ([server] api_keys)" in refused(
        "[tenants.batch.policy]\nmax_n = 1\n", "\n" + without_keys
    )


def test_check_config_describes_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hasten.toml"
    path.write_text(
        BASE
        + '[models."*".policy]\nmax_tokens_cap = 1024\ndrop = ["logit_bias"]\n'
        + "set = { temperature = 0 }\n"
        + '[tenants.batch.policy]\nmax_n = 1\non_exceed = "reject"\n',
        encoding="utf-8",
    )
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "    policy: max_tokens cap 1024; on exceed clamp; drop logit_bias; set temperature=0"
        in out
    )
    assert "  tenant batch policy: max n 1; on exceed reject" in out


def test_check_config_refuses_a_forbidden_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hasten.toml"
    path.write_text(BASE + '[models."*".policy]\nset = { stream = false }\n', encoding="utf-8")
    assert main(["check-config", str(path)]) == 2
    error = capsys.readouterr().err
    assert "models.*.policy.set.stream: 'stream' cannot be dropped or set" in error

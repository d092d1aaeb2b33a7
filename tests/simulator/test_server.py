"""The `hasten simulate` command-line glue: flags, TOML precedence, and a real served process."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hasten.simulator.server import add_arguments, config_from_args, run
from tests.support.servers import free_port


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults() -> None:
    args = parse([])
    assert (args.host, args.port, args.config) == ("127.0.0.1", 8090, None)
    config = config_from_args(args)
    assert config.models == ("sim-model",)
    assert not config.has_latency and not config.has_faults


def test_flags_override_the_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text("[simulator]\nttft_base_ms = 40\ndecode_ms_per_token = 5\nseed = 3\n")
    args = parse(
        [
            "--config",
            str(path),
            "--decode-ms",
            "2",
            "--error-rate",
            "0.1",
            "--model",
            "a,b",
            "--model",
            "c",
            "--straggler-prob",
            "0.5",
            "--rate-limit-rate",
            "0.2",
        ]
    )
    config = config_from_args(args)
    assert config.ttft_base_ms == 40 and config.seed == 3  # from the file
    assert config.decode_ms_per_token == 2 and config.error_rate == 0.1  # from flags
    assert config.models == ("a", "b", "c")
    assert config.straggler_prob == 0.5 and config.rate_limit_rate == 0.2


def test_invalid_settings_fail_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(parse(["--error-rate", "3"])) == 2
    assert "error_rate" in capsys.readouterr().err


def test_run_serves_until_terminated() -> None:
    port = free_port()
    code = (
        "import argparse, sys\n"
        "from hasten.simulator.server import add_arguments, run\n"
        "parser = argparse.ArgumentParser(); add_arguments(parser)\n"
        "sys.exit(run(parser.parse_args(sys.argv[1:])))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--port", str(port), "--model", "banner-model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "banner-model" in banner and str(port) in banner
        deadline = time.monotonic() + 15
        while True:
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("simulator process did not start serving")
                time.sleep(0.05)
        assert [model["id"] for model in models["data"]] == ["banner-model"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_stall_and_corruption_rates_have_flags() -> None:
    flags = ["--silent-rate", "0.1", "--hang-rate", "0.2", "--malformed-rate", "0.3"]
    config = config_from_args(parse([*flags, "--truncate-rate", "0.4"]))
    rates = (config.silent_rate, config.hang_rate, config.malformed_rate, config.truncate_rate)
    assert rates == (0.1, 0.2, 0.3, 0.4)

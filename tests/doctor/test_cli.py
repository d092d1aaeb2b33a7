"""``hasten doctor`` as a user runs it: the acceptance run against ``hasten simulate`` with
exactly the issue's flags, the text report, the JSON shape, exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from hasten.cli import main
from tests.doctor.test_probe import SECRET, refuse_key, within
from tests.support.servers import ServerThread, SimulatorProcess, free_port

ACCEPTANCE_FLAGS = ("--rtt-ms", "80", "--ttft-ms", "300", "--decode-ms", "20")


@pytest.fixture(scope="module")
def simulator() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(*ACCEPTANCE_FLAGS) as sim:
        yield sim


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hasten", "doctor", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_acceptance_recovers_rtt_ttft_and_decode(simulator: SimulatorProcess) -> None:
    """`hasten doctor` with its defaults against `hasten simulate --rtt-ms 80 --ttft-ms 300
    --decode-ms 20` (otherwise defaults: no jitter, no stragglers): within 10% of each."""
    done = doctor(simulator.url, "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    latency = report["latency"]
    assert within(latency["rtt_ms"], 80.0), latency
    assert within(latency["server_ttft_ms"], 300.0), latency
    assert within(latency["client_ttft_ms"]["median"], 380.0), latency
    assert within(latency["decode_ms_per_token"]["median"], 20.0), latency
    assert within(latency["tokens_per_s"], 50.0), latency
    assert_json_shape(report)


def assert_json_shape(report: dict[str, Any]) -> None:
    assert set(report) == {
        "target", "network", "latency", "streaming", "prompt_cache", "budget", "levers",
        "notes", "method",
    }  # fmt: skip
    assert report["target"]["num_tries"] == 5 and report["target"]["max_tokens"] == 32
    assert set(report["network"]) == {
        "dns_ms", "connect_ms", "tls_ms", "round_trip_ms", "round_trip_method",
    }  # fmt: skip
    assert report["network"]["dns_ms"] is None and report["network"]["tls_ms"] is None
    assert set(report["network"]["round_trip_ms"]) == {"median", "min", "max", "stdev", "num"}
    assert report["streaming"]["is_streaming"] is True
    assert report["prompt_cache"]["is_detected"] is False
    assert [phase["phase"] for phase in report["budget"]] == [
        "DNS", "TCP connect", "TLS", "round trip", "server TTFT", "decode x31",
    ]  # fmt: skip
    names = [lever["name"] for lever in report["levers"]]
    assert names == [
        "streaming", "caching", "hedging", "nearer deployment", "warm connections",
        "max_tokens cap", "local model",
    ]  # fmt: skip
    for lever in report["levers"]:
        assert set(lever) == {"name", "saved_ms", "per", "basis"} and lever["basis"]


def test_text_report_has_its_sections_and_chart(
    simulator: SimulatorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", simulator.url, "--tries", "2", "--max-tokens", "8"]) == 0
    out = capsys.readouterr().out
    for heading in ("network", "model", "time budget", "what hasten would save", "how"):
        assert f"\n{heading}" in out
    assert "round trip (RTT)" in out and "server TTFT" in out and "█" in out
    assert "tokens/s" in out and "decode x7" in out


def test_unreachable_url_exits_1_with_one_line() -> None:
    done = doctor(f"http://127.0.0.1:{free_port()}/v1")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("hasten doctor: cannot connect to 127.0.0.1:")
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_refused_key_exits_1_and_never_prints_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCTOR_TEST_KEY", SECRET)
    with ServerThread(refuse_key, lifespan="off") as server:
        assert main(["doctor", server.url, "--key-env", "DOCTOR_TEST_KEY"]) == 1
    captured = capsys.readouterr()
    assert "answered 401" in captured.err and "$DOCTOR_TEST_KEY" in captured.err
    assert SECRET not in captured.err + captured.out


@pytest.mark.parametrize(
    "args",
    [["--key-env", "HASTEN_DOCTOR_UNSET_VARIABLE"], ["--tries", "0"], ["--max-tokens", "1"]],
)
def test_bad_arguments_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "http://127.0.0.1:1/v1", *args]) == 2
    assert capsys.readouterr().err.startswith("hasten doctor: ")

"""hasten bench reports end to end: the real simulator, directly and behind a real gateway.

Asserts structure and consistency with the recorded samples, never timings.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy
import orjson
import pytest

from hasten.loadgen import LoadSettings, run_load
from hasten.loadgen.cli import add_arguments, run
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIM = SimConfig(ttft_base_ms=2.0, decode_ms_per_token=0.5, output_tokens=6, jitter_sigma=0.5)


@pytest.fixture(scope="module")
def targets() -> Iterator[tuple[str, str]]:
    """(through the gateway, direct to the simulator) base URLs."""
    with ServerThread(build_app(SIM)) as sim:
        with running_gateway(make_config({"sim": f"{sim.url}/v1"})) as gateway:
            yield f"{gateway.url}/v1", f"{sim.url}/v1"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*argv, "--no-progress"])


async def test_vllm_and_guidellm_fields_match_the_samples(targets: tuple[str, str]) -> None:
    _, direct_url = targets
    objectives_ms = {"ttft": 3.0, "tpot": 1.0, "e2el": 8.0}
    report = await run_load(
        LoadSettings(
            base_url=direct_url,
            stream=True,
            concurrency=3,
            num_requests=40,
            keep_samples=True,
            percentiles=(50.0, 90.0, 99.0),
            goodput_ms=objectives_ms,
        )
    )
    samples = report.samples
    assert samples is not None and report.num_ok == 40
    vllm = report.vllm
    assert vllm["completed"] == 40 and vllm["failed"] == 0
    assert vllm["total_output_tokens"] == sum(samples.request_output_tokens) == 40 * 6
    assert vllm["total_input_tokens"] > 0 and report.output_token_source == "usage"
    assert vllm["mean_e2el_ms"] == pytest.approx(numpy.mean(samples.latency_ms))
    assert vllm["std_e2el_ms"] == pytest.approx(numpy.std(samples.latency_ms))
    assert vllm["p90_e2el_ms"] == pytest.approx(numpy.percentile(samples.latency_ms, 90))
    assert vllm["p99_ttft_ms"] == pytest.approx(numpy.percentile(samples.ttft_ms, 99))
    assert vllm["mean_itl_ms"] == pytest.approx(numpy.mean(samples.inter_token_ms))
    tpots_ms = [
        (latency - ttft) / (tokens - 1)
        for ttft, latency, tokens in zip(
            samples.request_ttft_ms, samples.latency_ms, samples.request_output_tokens, strict=True
        )
        if tokens > 1
    ]
    assert vllm["median_tpot_ms"] == pytest.approx(numpy.median(tpots_ms))
    num_good = sum(
        ttft <= objectives_ms["ttft"]
        and (latency - ttft) / (tokens - 1) <= objectives_ms["tpot"]
        and latency <= objectives_ms["e2el"]
        for ttft, latency, tokens in zip(
            samples.request_ttft_ms, samples.latency_ms, samples.request_output_tokens, strict=True
        )
    )
    assert vllm["request_goodput"] == pytest.approx(num_good / report.duration_s)
    assert vllm["request_goodput"] <= vllm["request_throughput"]
    guidellm = report.guidellm
    latency_s = guidellm["request_latency"]["successful"]
    assert latency_s["mean"] == pytest.approx(numpy.mean(samples.latency_ms) / 1000)
    assert latency_s["count"] == 40
    tpot = guidellm["time_per_output_token_ms"]["successful"]
    pairs = zip(samples.latency_ms, samples.request_output_tokens, strict=True)
    expected = [latency / tokens for latency, tokens in pairs]
    assert tpot["mean"] == pytest.approx(numpy.mean(expected))
    assert sum(bucket.num_ok for bucket in report.timeline) == 40


def test_compare_run_writes_html_png_and_json(
    targets: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway_url, direct_url = targets
    html_path, png_path, json_path = tmp_path / "r.html", tmp_path / "r.png", tmp_path / "r.json"
    args = _args(
        "--base-url", gateway_url.replace("http://", "http://someone:pw@"),
        "--compare-url", direct_url,
        "--header", "X-Secret: hunter2",
        "--stream", "--num-requests", "30", "--num-unique", "5", "--concurrency", "2",
        "--percentiles", "50,99", "--goodput", "e2el:5000",
        "--report", str(html_path), "--png", str(png_path), "--result-json", str(json_path),
    )  # fmt: skip
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "== hasten" in out and "== direct" in out and "speedup" in out

    document = orjson.loads(json_path.read_bytes())
    hasten, direct = document["runs"]["hasten"], document["runs"]["direct"]
    assert hasten["vllm"]["completed"] == direct["vllm"]["completed"] == 30
    assert "p50_ttft_ms" in hasten["vllm"] and "p99_e2el_ms" in direct["vllm"]
    assert hasten["cache"].get("hit", 0) >= 1 and direct["cache"] == {"absent": 30}
    assert {row["figure"] for row in document["comparison"]} >= {"ttft p50", "e2e latency p99"}
    assert document["context"]["settings"]["base_url"] == gateway_url

    html = html_path.read_text(encoding="utf-8")
    for secret in ("hunter2", "someone", ":pw@"):
        assert secret not in html and secret not in json_path.read_text()
    # Self-contained: nothing is fetched (no src/href at all), URLs appear only as text.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "<script" not in html and "<link" not in html
    assert html.count("<svg") == 6
    for title in ("End-to-end latency CDF", "Time to first token CDF", "TTFT histogram"):
        assert title in html
    assert "Cache hit ratio" in html and "Run settings" in html and "num_requests" in html
    assert html.count(">hasten</text>") >= 3 and html.count(">direct</text>") >= 3
    assert png_path.read_bytes().startswith(PNG_SIGNATURE)


def test_single_run_json_keeps_its_shape(
    targets: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, direct_url = targets
    assert run(_args("--base-url", direct_url, "--num-requests", "4", "--json")) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["num_ok"] == 4 and "latency_ms" in document
    assert document["vllm"]["request_goodput"] is None
    assert document["guidellm"]["request_latency"]["successful"]["count"] == 4
    assert math.isfinite(document["vllm"]["p99_e2el_ms"])


def test_png_without_matplotlib_fails_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = _args("--base-url", "http://127.0.0.1:9/v1", "--png", str(tmp_path / "x.png"))
    assert run(args) == 2
    assert "hasten[report]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ("--goodput", "latency:5"),
        ("--percentiles", "0"),
        ("--compare-url", "http://127.0.0.1:9/v1", "--compare-label", "hasten"),
    ],
)
def test_bad_report_arguments(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_args(*argv)) == 2
    assert "hasten bench:" in capsys.readouterr().err

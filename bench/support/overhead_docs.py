"""Renders bench/overhead/overhead.py results as the "Gateway overhead" section of
docs/benchmarks.md.

Only that section is replaced, so other benchmarks can keep their own sections in the file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

HEADING = "## Gateway overhead"
FILE_TITLE = "# Benchmarks\n"

METHOD = """\
What hasten itself costs on the request path, next to the LiteLLM proxy. One script starts a
zero-latency simulator, hasten and LiteLLM (1 worker) on loopback and measures, in one run with
one client (hasten's own load generator, in-process, uvloop), three targets: the simulator
called directly, through hasten, and through LiteLLM. Each target is warmed up first; the
rounds alternate the targets' order so machine noise lands on all of them alike. Overhead
requests use `temperature: 0.7`, which hasten never caches, so they measure the proxy path;
the cache-hit figure repeats one prompt at temperature 0. Idle RSS is read from
`/proc/PID/status` (VmRSS), summed over each server's process tree, once the servers are up
and again after all the load, each time after a second of idling (the direct column is the
simulator itself).
Client, gateways and simulator share the same 2 cores, so absolute figures are pessimistic;
the comparison is what matters."""


def _pair(values: dict[str, Any] | None) -> str:
    if not values or values.get("p50") is None:
        return "–"
    return f"{values['p50']:.2f} / {values['p99']:.2f}"


def _row(label: str, cells: list[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def render(result: dict[str, Any]) -> str:
    names = list(result["sequential_latency_ms"])
    titles = {"direct": "direct", "hasten": "hasten", "litellm": "LiteLLM"}
    added = result["added_ms"]
    rows = [
        _row("", [titles.get(n, n) for n in names]),
        _row("---", ["---:"] * len(names)),
        _row(
            "non-stream latency p50 / p99 (ms)",
            [_pair(result["sequential_latency_ms"][n]) for n in names],
        ),
        _row(
            "**added** over direct p50 / p99 (ms)",
            ["–" if n == "direct" else _pair(added[n]["sequential"]) for n in names],
        ),
        _row("stream TTFT p50 / p99 (ms)", [_pair(result["stream_ttft_ms"][n]) for n in names]),
        _row(
            "**added** stream TTFT p50 / p99 (ms)",
            ["–" if n == "direct" else _pair(added[n]["stream_ttft"]) for n in names],
        ),
        _row(
            f"throughput, {result['throughput_concurrency']} clients, non-stream (req/s)",
            [f"{result['throughput_rps'][n]}" for n in names],
        ),
        _row(
            "measuring client's CPU during that (% of one core)",
            [f"{result['throughput_client_cpu_percent'][n]}" for n in names],
        ),
        _row("idle RSS at start (MB)", _rss_cells(result, "idle_at_start", names)),
        _row("idle RSS after the load (MB)", _rss_cells(result, "idle_after_load", names)),
    ]
    cache = result["cache_hit_ms"]
    hit_ratio = "n/a" if cache["hit_ratio"] is None else f"{cache['hit_ratio']:.0%}"
    lines = [
        HEADING,
        "",
        METHOD,
        "",
        _provenance(result),
        "",
        *rows,
        "",
        f"hasten exact-cache hit over HTTP: p50 {cache['p50']} ms, p99 {cache['p99']} ms "
        f"(hit ratio {hit_ratio}, n={cache['count']}).",
        "",
        *_ratio_lines(result),
        "Reproduce (the figures above; `--quick` for a sub-minute smoke run):",
        "",
        "```",
        result["command"],
        "```",
        "",
    ]
    return "\n".join(lines)


def _rss_cells(result: dict[str, Any], moment: str, names: list[str]) -> list[str]:
    # The direct target's server process is the simulator.
    by_process = result["rss_mb"][moment]
    return [f"{by_process['simulator' if n == 'direct' else n]}" for n in names]


def _provenance(result: dict[str, Any]) -> str:
    litellm = result["litellm"]
    version = (
        f"LiteLLM {litellm['version']}"
        if litellm.get("available")
        else f"LiteLLM not measured ({litellm.get('reason')})"
    )
    plan, machine = result["plan"], result["machine"]
    return (
        f"Measured {time.strftime('%Y-%m-%d')} on {machine['cores']} cores (1-minute load "
        f"average {machine['load_average_1m_at_start']} at the start: a shared machine, so p99s "
        f"carry others' noise), Python {machine['python']}, {version}; "
        f"{plan['num_rounds']} rounds of {plan['num_sequential_per_round']} sequential "
        "requests per target and mode, "
        f"{plan['throughput_duration_s_per_round']} s of load per target per round."
    )


def _ratio_lines(result: dict[str, Any]) -> list[str]:
    ratios = result.get("ratios")
    if not ratios:
        return []

    def show(value: float | None) -> str:
        return "n/a (hasten adds nothing measurable)" if value is None else f"{value}×"

    return [
        "Ratios: LiteLLM adds "
        f"{show(ratios['litellm_added_over_hasten_added_sequential_p50'])} (p50) and "
        f"{show(ratios['litellm_added_over_hasten_added_sequential_p99'])} (p99) the latency "
        "hasten adds to a non-stream request, "
        f"{show(ratios['litellm_added_over_hasten_added_stream_ttft_p50'])} (p50) to stream "
        "TTFT; hasten serves "
        f"{show(ratios['hasten_over_litellm_throughput'])} LiteLLM's throughput.",
        "",
    ]


def write(path: Path, result: dict[str, Any]) -> None:
    """Replaces the section (heading up to the next ``## ``) or appends it."""
    section = render(result)
    text = path.read_text(encoding="utf-8") if path.exists() else FILE_TITLE
    start = text.find(HEADING)
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + ("" if end == -1 else text[end + 1 :])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

"""Paired requests for bench/support/fleet_cost.py: request i goes to every target back to back (in
an order rotated with i), so a moment of load from the rest of the machine lands on all of
them alike, and the cost of one target over another is the median of the per-pair
differences: far steadier on a busy machine than the difference of two medians.

Each answer's ``server-timing: hasten;dur=`` (the gateway's own time for the request) is
kept too: it leaves out the client and the loopback hops.

``GAP_S`` passes between two requests: what a replica does after an answer (the relay's
last write, a key's bookkeeping round trip) is then over before the next target is asked,
so it is not charged to whichever target comes next in the order (on 2 cores it was: up to
+0.5 ms, to every target after a ``[fleet]`` one). The paired figures are therefore the
request path's own cost; the load generator's back-to-back rounds show the rest.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "sim-model"
HIT_PROMPT = "fleet cost: the one question every hit repeats"
GAP_S = 0.01


@dataclass(slots=True)
class Paired:
    """Per target, aligned by request index: client round trip and gateway time (ms)."""

    client_ms: dict[str, list[float]] = field(default_factory=dict)
    gateway_ms: dict[str, list[float]] = field(default_factory=dict)


def _gateway_ms(response: httpx.Response) -> float | None:
    timing = response.headers.get("server-timing", "")
    if "hasten;dur=" not in timing:
        return None  # the simulator itself
    return float(timing.split("hasten;dur=")[1].split(",")[0])


async def _one(
    client: httpx.AsyncClient,
    base_url: str,
    content: str,
    headers: Mapping[str, str],
    is_stream: bool = False,
) -> tuple[float, float | None]:
    body: dict[str, Any] = {
        "model": MODEL,
        "temperature": 0,
        "messages": [{"role": "user", "content": content}],
    }
    if is_stream:
        body["stream"] = True  # read whole: the client's time is to the stream's end
    started = time.perf_counter()
    response = await client.post(f"{base_url}/chat/completions", json=body, headers=dict(headers))
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    response.raise_for_status()
    return elapsed_ms, _gateway_ms(response)


async def measure_paired(
    targets: Mapping[str, str],
    *,
    kind: str,
    num_pairs: int,
    headers: Mapping[str, str],
    tag: str = "",
    is_stream: bool = False,
) -> Paired:
    """``kind`` "miss": a fresh prompt per index (the same for every target); "hit": one
    prompt, asked once first so every later ask is an L1 hit. ``tag`` sets one measurement's
    prompts apart from another's, so a target measured twice misses both times.
    ``is_stream``: asked as streams (each read to its end)."""
    names = list(targets)
    paired = Paired({n: [] for n in names}, {n: [] for n in names})
    clients = {name: httpx.AsyncClient(timeout=30.0) for name in names}
    try:
        for name in names:  # a connection each, and for hits the entry, before counting
            await _one(clients[name], targets[name], HIT_PROMPT, headers, is_stream)
        for index in range(num_pairs):
            order = names[index % len(names) :] + names[: index % len(names)]
            content = HIT_PROMPT if kind == "hit" else f"fleet cost: miss {tag} {index}"
            for name in order:
                client = clients[name]
                asked = _one(client, targets[name], content, headers, is_stream)
                client_ms, gateway_ms = await asked
                await asyncio.sleep(GAP_S)
                paired.client_ms[name].append(client_ms)
                if gateway_ms is not None:
                    paired.gateway_ms[name].append(gateway_ms)
    finally:
        for client in clients.values():
            await client.aclose()
    return paired


def median_difference(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The median over pairs of a[i] - b[i] (ms, rounded to the microsecond)."""
    if not a or len(a) != len(b):
        return None
    return round(statistics.median(x - y for x, y in zip(a, b, strict=True)), 3)


def paired_figures(paired: Paired, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """For each (target, baseline): the median per-pair difference, client and gateway."""
    figures: dict[str, Any] = {}
    for target, baseline in pairs:
        if target not in paired.client_ms or baseline not in paired.client_ms:
            continue
        figures[f"{target} - {baseline}"] = {
            "client_ms": median_difference(paired.client_ms[target], paired.client_ms[baseline]),
            "gateway_ms": median_difference(
                paired.gateway_ms.get(target, []), paired.gateway_ms.get(baseline, [])
            ),
        }
    return figures

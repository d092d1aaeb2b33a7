"""What ``resume_streams`` costs an uncut stream: a cache miss with it on, and with it off.

Two gateways in front of one zero-latency simulator, the same config but for
``[models."*"] resume_streams``, taking turns (the order alternating) on sequential stream
cache misses (a fresh prompt each), read to the last byte. Prints the p50 and p90 of the
client's round trip for each, the added p50 (and the median of each round's on-minus-off
difference, which load drift cancels out of), and, measured in-process without a network, what
forwarding one answer's chunks through ``StreamResume`` costs over the bare chunk iterator.
One summary line, then the figures as JSON.

    .venv/bin/python bench/reliability/resume.py [--num-requests 400] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hasten.config import CacheConfig, GatewayConfig, ModelRoute, UpstreamConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.proxy.resumer import StreamResume
from hasten.routing.models import build_route
from hasten.simulator import SimConfig, build_app
from hasten.upstream.client import UpstreamCall
from tests.proxy.test_splice import chat_events
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread

NUM_WARMUP = 30


def _config(sim: ServerThread, is_resuming: bool) -> GatewayConfig:
    config = make_config({"sim": sim.url + "/v1"}, cache=CacheConfig(backend="memory"))
    models = {n: replace(r, is_resuming_streams=is_resuming) for n, r in config.models.items()}
    return replace(config, models=models)


def _round_trips(on: ServerThread, off: ServerThread, num_requests: int) -> dict[str, list[float]]:
    targets = {"on": on, "off": off}
    times: dict[str, list[float]] = {name: [] for name in targets}
    with httpx.Client(timeout=30) as client:
        for i in range(num_requests + NUM_WARMUP):
            order = list(targets) if i % 2 else list(reversed(targets))
            for name in order:
                body = {
                    "model": "sim-model",
                    "temperature": 0,
                    "stream": True,
                    "messages": [{"role": "user", "content": f"{name} question {i}"}],
                }
                started_s = time.perf_counter()
                url = f"{targets[name].url}/v1/chat/completions"
                with client.stream("POST", url, json=body) as response:
                    data = response.read()
                elapsed_ms = (time.perf_counter() - started_s) * 1000.0
                assert response.headers["x-hasten-cache"] == "miss"
                assert data.endswith(b"data: [DONE]\n\n") and b"hasten-resume" not in data
                if i >= NUM_WARMUP:
                    times[name].append(elapsed_ms)
    return times


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.status, self._chunks = 200, chunks
        self.headers: Mapping[str, str] = {}

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def read(self, timeout_s: float) -> bytes:
        return b""

    def close(self) -> None:
        pass


def _wrapper_us(num_tokens: int, num_rounds: int) -> dict[str, float]:
    """Per answer: the chunks read bare, and through StreamResume (no network)."""
    chunks = chat_events([f" word{i}" for i in range(num_tokens)])
    upstream = UpstreamConfig(name="sim", url="http://sim.test/v1")
    route = build_route(
        ModelRoute(name="m", upstream="sim", is_resuming_streams=True),
        {"sim": upstream},
        ModelCachePolicy(),
    )

    def call() -> UpstreamCall:
        deadline_s = time.monotonic() + 60
        return UpstreamCall(
            _Response(chunks), upstream, headers={}, ttfb_ms=0.0, deadline_s=deadline_s
        )

    async def opener(body: bytes, excluded: frozenset[str]) -> UpstreamCall:
        raise AssertionError("an uncut stream is never reopened")

    async def bare() -> None:
        async for _ in call().iter_chunks():
            pass

    async def wrapped() -> None:
        resume = StreamResume(opener, route, "chat", lambda: b"{}")
        async for _ in resume.chunks(call()):
            pass

    async def measure() -> dict[str, float]:
        figures: dict[str, list[float]] = {"bare": [], "resume": []}
        for _ in range(num_rounds):
            for name, run in (("bare", bare), ("resume", wrapped)):
                started_s = time.perf_counter()
                await run()
                figures[name].append((time.perf_counter() - started_s) * 1e6)
        return {name: statistics.median(values) for name, values in figures.items()}

    return asyncio.run(measure())


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=400, help="per gateway")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    args = parser.parse_args(argv)
    with (
        ServerThread(build_app(SimConfig(output_tokens=args.tokens))) as sim,
        running_gateway(_config(sim, True)) as on,
        running_gateway(_config(sim, False)) as off,
    ):
        times = _round_trips(on, off, args.num_requests)
    wrapper = _wrapper_us(args.tokens, 2000)
    result: dict[str, Any] = {
        "num_requests": args.num_requests,
        "tokens": args.tokens,
        **{f"{name}_p50_ms": round(statistics.median(v), 4) for name, v in times.items()},
        **{f"{name}_p90_ms": round(_p(v, 90), 4) for name, v in times.items()},
        "added_p50_ms": round(statistics.median(times["on"]) - statistics.median(times["off"]), 4),
        # Each round's on minus off: the two ran back to back, so load drift cancels out.
        "paired_median_ms": round(
            statistics.median(a - b for a, b in zip(times["on"], times["off"], strict=True)), 4
        ),
        "bare_chunks_us": round(wrapper["bare"], 2),
        "resume_chunks_us": round(wrapper["resume"], 2),
    }
    result["added_per_answer_us"] = round(wrapper["resume"] - wrapper["bare"], 2)
    print(
        f"resume_streams on an uncut stream miss ({args.tokens} tokens, {args.num_requests} each):"
        f" p50 on {result['on_p50_ms']:.3f} ms, off {result['off_p50_ms']:.3f} ms, added "
        f"{result['added_p50_ms']:+.3f} ms (paired {result['paired_median_ms']:+.3f} ms); "
        f"in-process {result['added_per_answer_us']:+.1f} us "
        f"per answer"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

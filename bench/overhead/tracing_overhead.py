"""Tracing's cost: one gateway with tracing off and one with it on, side by side.

Both front the same zero-latency simulator on loopback; "on" exports over OTLP/HTTP with
the batch processor to a loopback collector that discards what it gets. Sequential
non-stream requests (cache off), the two gateways alternated round by round so machine
noise lands on both. Also times the calls the request path makes on the no-op stage.

    .venv/bin/python bench/overhead/tracing_overhead.py [--requests 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import timeit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from hasten.app import HastenApp
from hasten.config import CacheConfig, GatewayConfig, ModelRoute, UpstreamConfig
from hasten.config.telemetry import TelemetryConfig
from hasten.simulator import SimConfig, build_app
from hasten.telemetry.tracing import Tracing
from hasten.values.stage import NO_STAGE

NUM_WARMUP = 50
NUM_STAGE_CALLS = 200_000
BODY = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


class _Discard(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


class _Server:
    """An ASGI app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: object) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _config(upstream_url: str) -> GatewayConfig:
    upstream = UpstreamConfig(name="sim", url=upstream_url + "/v1")
    return GatewayConfig(
        upstreams={"sim": upstream},
        models={"*": ModelRoute(name="*", upstream="sim")},
        cache=CacheConfig(is_enabled=False),
    )


def _off_path_calls() -> None:
    """About what one cached-miss request calls on the no-op stage."""
    with NO_STAGE.child("cache.lookup") as lookup:
        lookup.set("hasten.cache.is_hit", False)
    NO_STAGE.set("hasten.cache", "miss")
    NO_STAGE.inject({})
    if NO_STAGE.is_recording:
        raise AssertionError


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300, help="per gateway per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Discard)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_port}/v1/traces"
    with _Server(build_app(SimConfig(output_tokens=16))) as sim_url:
        config = _config(sim_url)
        on = Tracing.from_config(TelemetryConfig(otlp_endpoint=endpoint))
        with (
            _Server(HastenApp(config, tracing=Tracing())) as off_url,
            _Server(HastenApp(config, tracing=on)) as on_url,
            httpx.Client(timeout=30) as client,
        ):
            urls = {"off": off_url, "on": on_url}
            samples: dict[str, list[float]] = {name: [] for name in urls}
            for url in urls.values():
                for _ in range(NUM_WARMUP):
                    client.post(f"{url}/v1/chat/completions", json=BODY)
            for _ in range(args.rounds):
                for name, url in urls.items():
                    for _ in range(args.requests):
                        started_s = time.perf_counter()
                        client.post(f"{url}/v1/chat/completions", json=BODY)
                        samples[name].append((time.perf_counter() - started_s) * 1000.0)
    for name, values in samples.items():
        values.sort()
        p90 = values[int(len(values) * 0.9)]
        print(
            f"tracing {name}: n={len(values)} median {statistics.median(values):.3f} ms, "
            f"p90 {p90:.3f} ms"
        )
    seconds = timeit.timeit(_off_path_calls, number=NUM_STAGE_CALLS)
    print(f"no-op stage calls per request: {seconds / NUM_STAGE_CALLS * 1e9:.0f} ns")


if __name__ == "__main__":
    main()

"""What sharing routing state through Redis costs a request: sharing off and on, side by side.

Two gateways measured in front of the same two zero-latency simulators (one route, two
deployments): "off" has no ``[fleet]``; "on" shares its routing state through a throwaway
redis-server on loopback, with two more sharing replicas under background load so that it
folds in their news every tick, as in a fleet. Sequential non-stream cache misses, the two
measured gateways alternated request by request so machine noise lands on both. Reports the
p50 of the client's round trip and of the gateway's own ``server-timing``, and what the
"on" gateway's sync did meanwhile. Prints one summary line, then the figures as JSON.

    .venv/bin/python bench/fleet/fleet_routing.py [--requests 1500] [--peer-pause-s 0.02]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hasten.config import CacheConfig, GatewayConfig, ModelRoute, ServerConfig, UpstreamConfig
from hasten.config.fleet import FleetConfig
from hasten.config.routing import DeploymentConfig, RoutingConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread, redis_server

NUM_WARMUP = 50
ADMIN_KEY = "bench-admin"


def _config(sim_urls: list[str], redis_url: str | None) -> GatewayConfig:
    upstreams = {
        f"d{i}": UpstreamConfig(name=f"d{i}", url=url + "/v1") for i, url in enumerate(sim_urls)
    }
    deployments = tuple(DeploymentConfig(upstream=name) for name in upstreams)
    route = ModelRoute(
        name="*", upstream="d0", routing=replace(RoutingConfig(), deployments=deployments)
    )
    return GatewayConfig(
        server=ServerConfig(admin_api_key=ADMIN_KEY),
        upstreams=upstreams,
        models={"*": route},
        cache=CacheConfig(is_enabled=False),
        fleet=FleetConfig(redis_url=redis_url),
    )


def _body(i: int) -> dict[str, Any]:
    content = f"bench {i}"
    return {"model": "m", "messages": [{"role": "user", "content": content}], "temperature": 0}


def _gateway_ms(response: httpx.Response) -> float:
    return float(response.headers["server-timing"].split("hasten;dur=")[1].split(",")[0])


def _peer_load(urls: list[str], stop: threading.Event, pause_s: float) -> None:
    """The two peers' traffic: their news is what the measured gateway merges."""
    with httpx.Client(timeout=30) as client:
        i = 0
        while not stop.is_set():
            client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=_body(i))
            i += 1
            stop.wait(pause_s)


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        redis_url = stack.enter_context(redis_server())
        sims = [stack.enter_context(ServerThread(build_app(SimConfig(output_tokens=16))))]
        sims.append(stack.enter_context(ServerThread(build_app(SimConfig(output_tokens=16)))))
        sim_urls = [s.url for s in sims]
        off = stack.enter_context(running_gateway(_config(sim_urls, None)))
        on = stack.enter_context(running_gateway(_config(sim_urls, redis_url)))
        peers = [stack.enter_context(running_gateway(_config(sim_urls, redis_url))) for _ in "ab"]
        stop = threading.Event()
        peer_urls = [p.url for p in peers]
        loader = threading.Thread(target=_peer_load, args=(peer_urls, stop, args.peer_pause_s))
        loader.start()
        client = stack.enter_context(httpx.Client(timeout=30))
        urls = {"off": off.url, "on": on.url}
        rtt: dict[str, list[float]] = {name: [] for name in urls}
        gateway: dict[str, list[float]] = {name: [] for name in urls}
        n = 0
        try:
            for url in urls.values():
                for _ in range(NUM_WARMUP):
                    client.post(f"{url}/v1/chat/completions", json=_body(n := n + 1))
            # Request by request in turn: drift in the machine's load lands on both alike.
            for _ in range(args.requests):
                for name, url in urls.items():
                    response = client.post(f"{url}/v1/chat/completions", json=_body(n := n + 1))
                    rtt[name].append(response.elapsed.total_seconds() * 1000.0)
                    gateway[name].append(_gateway_ms(response))
            fleet = client.get(
                f"{on.url}/admin/routing", headers={"authorization": f"Bearer {ADMIN_KEY}"}
            ).json()["fleet"]
        finally:
            stop.set()
            loader.join(timeout=30)
    return {
        "requests_per_gateway": args.requests,
        "client_p50_ms": {k: round(statistics.median(v), 4) for k, v in rtt.items()},
        "gateway_p50_ms": {k: round(statistics.median(v), 4) for k, v in gateway.items()},
        "on_sync": {
            k: fleet[k] for k in ("syncs", "sync_failures", "remote_entries", "remote_observations")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="per measured gateway")
    parser.add_argument("--peer-pause-s", type=float, default=0.02, help="between peer requests")
    result = _measure(parser.parse_args())
    client, gateway = result["client_p50_ms"], result["gateway_p50_ms"]
    result["added_client_p50_ms"] = round(client["on"] - client["off"], 4)
    result["added_gateway_p50_ms"] = round(gateway["on"] - gateway["off"], 4)
    print(
        f"shared routing: p50 added {result['added_client_p50_ms']:+.3f} ms client "
        f"({client['off']:.3f} off, {client['on']:.3f} on), "
        f"{result['added_gateway_p50_ms']:+.3f} ms in the gateway "
        f"({gateway['off']:.3f} off, {gateway['on']:.3f} on); "
        f"n={result['requests_per_gateway']} each, "
        f"{result['on_sync']['syncs']} syncs, "
        f"{result['on_sync']['remote_observations']} remote observations merged"
    )
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()

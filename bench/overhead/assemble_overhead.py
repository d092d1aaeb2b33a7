"""What assembling a non-stream answer from an upstream stream costs the gateway.

Two gateways in front of one zero-latency simulator, one with ``stream_upstream`` on (the
non-stream request is asked as a stream and its body assembled), one with it off (asked
whole), taking turns on sequential non-stream cache misses (a fresh prompt each). Prints the
median and p90 of the client's round trip and of the gateway's own ``server-timing``.

    .venv/bin/python bench/overhead/assemble_overhead.py [--num-requests 300] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hasten.config import CacheConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread


def _gateway_ms(response: httpx.Response) -> float:
    timing = response.headers["server-timing"]
    return float(timing.split("hasten;dur=")[1].split(",")[0])


def _quantiles(values: list[float]) -> str:
    cuts = statistics.quantiles(values, n=10)
    return f"median {statistics.median(values):.3f} ms, p90 {cuts[8]:.3f} ms"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=300, help="per gateway")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    args = parser.parse_args(argv)
    cache = CacheConfig(backend="memory")
    with ServerThread(build_app(SimConfig(output_tokens=args.tokens))) as sim:
        configs = {
            mode: make_config({"sim": sim.url + "/v1"}, cache=cache, is_stream_upstream=mode)
            for mode in (True, False)
        }
        with running_gateway(configs[True]) as on, running_gateway(configs[False]) as off:
            targets = {"streamed+assembled": on, "asked whole": off}
            round_trip: dict[str, list[float]] = {name: [] for name in targets}
            gateway: dict[str, list[float]] = {name: [] for name in targets}
            with httpx.Client(timeout=30) as client:
                for i in range(args.num_requests + 20):
                    for name, server in targets.items():
                        body = {
                            "model": "sim-model",
                            "temperature": 0,
                            "messages": [{"role": "user", "content": f"{name} question {i}"}],
                        }
                        response = client.post(f"{server.url}/v1/chat/completions", json=body)
                        assert response.status_code == 200 and response.json()["choices"]
                        assert response.headers["x-hasten-cache"] == "miss"
                        if i >= 20:  # warm-up rounds are dropped
                            round_trip[name].append(response.elapsed.total_seconds() * 1000)
                            gateway[name].append(_gateway_ms(response))
    for name in targets:
        print(
            f"{name:>20}: round trip {_quantiles(round_trip[name])}; "
            f"gateway {_quantiles(gateway[name])}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

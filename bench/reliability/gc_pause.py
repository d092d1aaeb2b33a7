"""What a full garbage collection costs a gateway, with and without its startup heap frozen.

    .venv/bin/python bench/reliability/gc_pause.py [--num-collections 5]

Builds the gateway in-process as ``hasten serve`` does (``HastenApp`` and its startup; the
upstream is a loopback URL nobody answers, since nothing is sent), once with the default
config and once with ``[semantic] enabled = true``, each in a fresh subprocess. Each times
``gc.collect(2)`` ``--num-collections`` times, then freezes the heap as ``server/heap.py``
does, and times the same collections again. A full collection stalls the event loop, so
this is the stall a request in flight would wait out. Prints one summary line, then JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from hasten.app import HastenApp
from hasten.config import parse_config
from hasten.served import Overrides, served_config

CONFIGS = {"default": {}, "semantic": {"semantic": {"enabled": True}}}


def _collections_ms(num: int) -> list[float]:
    times = []
    for _ in range(num):
        started = time.perf_counter()
        gc.collect(2)
        times.append(round((time.perf_counter() - started) * 1000, 3))
    return times


async def _measure(name: str, num: int) -> dict[str, Any]:
    overrides = Overrides(upstream_url="http://127.0.0.1:9/v1", cache_backend="memory")
    app = HastenApp(served_config(parse_config(CONFIGS[name], {}), overrides))
    await app.startup()
    gc.collect()
    tracked = len(gc.get_objects())
    before = _collections_ms(num)
    gc.freeze()
    frozen = gc.get_freeze_count()
    after = _collections_ms(num)
    return {
        "tracked_objects": tracked,
        "frozen_objects": frozen,
        "full_collection_ms": before,
        "full_collection_frozen_ms": after,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-collections", type=int, default=5)
    parser.add_argument("--one", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # the child: one config in a fresh process
        print(json.dumps(asyncio.run(_measure(args.one, args.num_collections))))
        return 0
    result: dict[str, Any] = {"benchmark": "gc_pause"}
    for name in CONFIGS:
        child = subprocess.run(
            [sys.executable, __file__, "--one", name, "--num-collections",
             str(args.num_collections)],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        result[name] = json.loads(child.stdout.strip().splitlines()[-1])
    parts = [
        f"{name}: {statistics.median(r['full_collection_ms']):.2f} ms -> "
        f"{statistics.median(r['full_collection_frozen_ms']):.3f} ms frozen "
        f"({r['frozen_objects']} objects)"
        for name, r in result.items()
        if name != "benchmark"
    ]
    print("full collection p50, startup heap as is -> frozen: " + "; ".join(parts))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

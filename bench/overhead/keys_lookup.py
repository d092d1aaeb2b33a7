"""What finding the caller's key costs the request path: a static key, a virtual key warm
in the lookup cache (memory and Redis stores), and a cold virtual key (one Redis round trip).

In process, no HTTP: ``Authenticator.resolve`` timed over many calls, rounds interleaved so
machine noise falls on every case alike. Needs redis-server (a throwaway one is started).
Prints one summary line, then JSON.

    .venv/bin/python bench/overhead/keys_lookup.py [--num-calls 20000] [--num-rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hasten.auth import Authenticator
from hasten.config import TenantKey
from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.keys.directory import KeyDirectory
from hasten.keys.lookup import ResolvedKeys
from hasten.keys.record import new_record
from hasten.keys.redis_store import RedisKeyStore
from hasten.keys.store import KeyStore, MemoryKeyStore
from tests.support.servers import redis_server

STATIC_KEYS = tuple(TenantKey(f"tenant-{i}", f"static-key-{i:04d}") for i in range(10))


async def _with_key(store: KeyStore, ttl_s: float) -> tuple[Authenticator, bytes]:
    record, secret = new_record("t", "bench", None, KeyLimits(100), now_s=time.time())
    assert await store.add(record, max_keys=10)
    directory = KeyDirectory(store, ResolvedKeys(ttl_s=ttl_s), max_keys=10)
    return Authenticator(STATIC_KEYS, "admin-key", directory), f"Bearer {secret}".encode()


async def _time_us(call: Callable[[], Awaitable[object]], num_calls: int) -> float:
    started = time.perf_counter()
    for _ in range(num_calls):
        await call()
    return (time.perf_counter() - started) / num_calls * 1e6


async def _run(redis_url: str, num_calls: int, num_rounds: int) -> dict[str, float]:
    link = FleetLink(FleetConfig(redis_url=redis_url, key_prefix="bench:keys:"))
    static = Authenticator(STATIC_KEYS, "admin-key")
    static_header = b"Bearer static-key-0009"  # the last one: the longest static scan
    warm_memory = await _with_key(MemoryKeyStore(), ttl_s=3600.0)
    warm_redis = await _with_key(RedisKeyStore(link), ttl_s=3600.0)
    # A TTL of zero: every call looks the key up in Redis (what the cache saves).
    cold_redis = await _with_key(RedisKeyStore(link), ttl_s=1e-9)
    cases: dict[str, Callable[[], Awaitable[object]]] = {
        "static_key_us": lambda: static.resolve(static_header),
        "virtual_warm_memory_us": lambda: warm_memory[0].resolve(warm_memory[1]),
        "virtual_warm_redis_us": lambda: warm_redis[0].resolve(warm_redis[1]),
        "virtual_cold_redis_us": lambda: cold_redis[0].resolve(cold_redis[1]),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(num_rounds):
        for name, call in cases.items():
            calls = num_calls // 20 if "cold" in name else num_calls
            samples[name].append(await _time_us(call, calls))
    await link.client.delete(link.key("keys", "records"), link.key("keys", "digests"))
    await link.aclose()
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-calls", type=int, default=20_000)
    parser.add_argument("--num-rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with redis_server() as url:
        result = asyncio.run(_run(url, args.num_calls, args.num_rounds))
    print(
        f"key lookup per request (median of {args.num_rounds} rounds): static "
        f"{result['static_key_us']:.2f} us, virtual warm {result['virtual_warm_memory_us']:.2f} us "
        f"(memory) / {result['virtual_warm_redis_us']:.2f} us (redis), virtual cold "
        f"{result['virtual_cold_redis_us']:.1f} us (one redis round trip)"
    )
    print(json.dumps({"num_calls": args.num_calls, "num_rounds": args.num_rounds, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

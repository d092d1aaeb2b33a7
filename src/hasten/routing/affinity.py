"""Prefix affinity: requests sharing a long prompt prefix go to the same deployment.

The key is a stable hash (blake2b, not Python's salted ``hash``) of the part of a prompt
that repeats across requests: tools plus every message but the last for chat, the head of
the prompt for legacy completions. Keys map to deployments by consistent hashing with
bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): walk the ring clockwise and take the
first deployment whose load is under ``ceil(load_factor * average)``, so a hot prefix spills
over instead of overloading one deployment, and removing one moves only its own keys.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hasten.wire import exactjson

NUM_VIRTUAL_NODES = 64


def stable_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def prefix_bytes(body: Mapping[str, Any], max_chars: int) -> bytes:
    """The repeating head of a request's prompt, at most ``max_chars`` long: the first
    ``max_chars`` bytes of ``{"tools": ..., "messages": <all but the last>}`` as orjson
    writes it, written only as far as needed (a body of 100 000 messages is not serialised
    on the event loop to keep its first kilobytes)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = [b'{"tools":', exactjson.dumps(body.get("tools")), b',"messages":[']
        size = sum(len(part) for part in parts)
        for i, message in enumerate(messages[:-1]):
            if size >= max_chars:
                break
            part = exactjson.dumps(message)  # any integer, as the client wrote it
            parts += (b",", part) if i else (part,)
            size += len(part) + (1 if i else 0)
        else:
            parts.append(b"]}")
        return b"".join(parts)[:max_chars]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt[:max_chars].encode()
    return b""


def prefix_key(body: Mapping[str, Any], *, min_chars: int, max_chars: int) -> int | None:
    """The affinity key, or None when the shared part is too short to be worth a cache.

    A legacy prompt is keyed on its first ``min_chars`` characters only: without message
    boundaries we cannot tell where the shared part ends, and any two prompts that agree on
    that much share at least that much cache.
    """
    head = prefix_bytes(body, max_chars)
    if len(head) < min_chars:
        return None
    if "messages" not in body:
        head = head[:min_chars]
    return stable_hash(head)


class HashRing:
    """Virtual nodes of each name on a 64-bit ring; more for heavier weights."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        points: list[tuple[int, str]] = []
        for name, weight in weights.items():
            num_nodes = max(1, round(NUM_VIRTUAL_NODES * weight))
            points.extend((stable_hash(f"{name}#{i}".encode()), name) for i in range(num_nodes))
        points.sort()
        self._hashes = [h for h, _ in points]
        self._names = [n for _, n in points]
        self._num_names = len(weights)

    def walk(self, key: int) -> Iterator[str]:
        """Each distinct name once, clockwise from ``key``."""
        if not self._names:
            return
        start = bisect.bisect_left(self._hashes, key)
        seen: set[str] = set()
        for offset in range(len(self._names)):
            name = self._names[(start + offset) % len(self._names)]
            if name not in seen:
                seen.add(name)
                yield name
                if len(seen) == self._num_names:
                    return


def bounded_capacity(loads: Sequence[int], load_factor: float) -> int:
    """Most requests one deployment may hold, counting the one being placed."""
    return max(1, math.ceil(load_factor * (sum(loads) + 1) / max(1, len(loads))))


def choose_bounded(
    ring: HashRing, key: int, loads: Mapping[str, int], load_factor: float
) -> str | None:
    """First name clockwise from ``key`` among ``loads``' keys whose load is under capacity."""
    if not loads:
        return None
    capacity = bounded_capacity(list(loads.values()), load_factor)
    for name in ring.walk(key):
        load = loads.get(name)
        if load is not None and load < capacity:
            return name
    return None

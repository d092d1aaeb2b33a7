"""The latency model as pure math: prefix cache, time to first token, decode pacing.

Nothing here sleeps or does I/O; the ASGI app asks for a `LatencyPlan` and executes it.
Randomness comes only from the `random.Random` passed in, so a fixed seed replays exactly.

Model, per request:
    first_token_ms = (rtt_ms + ttft_base_ms
                      + prefill_ms_per_token * uncached_prompt_tokens
                      + prefill_cached_ms_per_token * cached_prompt_tokens) * jitter * straggler
    token i (0-based) is emitted at first_token_ms + i * decode_ms_per_token * jitter' * straggler
Jitter factors are log-normal with median 1 (one for the first token, one for decode), drawn
once per request; a straggler (probability `straggler_prob`) multiplies both by
`straggler_mult`. Answers without a plan (/v1/models, errors) wait `rtt_ms` alone, unjittered.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from hasten.simulator.config import SimConfig


class PrefixCache:
    """Provider-style prompt prefix cache: an LRU of chained hashes of full token blocks.

    Block i's key hashes block i's tokens together with block i-1's key, so a key names a
    whole prefix; a prompt hits for as many leading blocks as are present. A trailing partial
    block is never cached, as with real providers.
    """

    def __init__(self, block_tokens: int, capacity_blocks: int) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = max(0, capacity_blocks)
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        self._lru.clear()

    def resize(self, capacity_blocks: int) -> None:
        self.capacity_blocks = max(0, capacity_blocks)
        self._evict()

    def block_keys(self, namespace: str, tokens: Sequence[str]) -> list[int]:
        """Chained keys of every full block of `tokens`; `namespace` (the model) seeds the chain.

        Python's str hash is salted per process, which is fine: keys never leave this process.
        """
        size = self.block_tokens
        key = hash(namespace)
        keys: list[int] = []
        for start in range(0, len(tokens) - size + 1, size):
            key = hash((key, *tokens[start : start + size]))
            keys.append(key)
        return keys

    def lookup_and_insert(self, namespace: str, tokens: Sequence[str]) -> int:
        """Returns how many leading tokens were cached, then caches every full block."""
        if self.capacity_blocks == 0:
            return 0
        keys = self.block_keys(namespace, tokens)
        lru = self._lru
        num_hit_blocks = 0
        for key in keys:
            if key not in lru:
                break
            num_hit_blocks += 1
        for key in keys:
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
        self._evict()
        return num_hit_blocks * self.block_tokens

    def _evict(self) -> None:
        while len(self._lru) > self.capacity_blocks:
            self._lru.popitem(last=False)


class BreakpointCache:
    """Anthropic's prompt cache: prefixes written only at ``cache_control`` breakpoints,
    read back at any content-block boundary a later prompt shares.

    A prompt is given as its tokens and the positions where its content blocks end; a
    prefix's key chains the hashes of its blocks (``PrefixCache`` says why), so a key names
    the whole prefix. ``lookup_and_write`` returns how many tokens were read from the cache
    (the longest written prefix at one of the prompt's block boundaries) and how many it
    wrote (from there to the last breakpoint), and writes the prefix at every breakpoint.
    Prefixes shorter than ``min_tokens`` are never cached, as at Anthropic.
    """

    def __init__(self, capacity: int, min_tokens: int) -> None:
        self.capacity = max(0, capacity)
        self.min_tokens = max(0, min_tokens)
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        self._lru.clear()

    def resize(self, capacity: int, min_tokens: int) -> None:
        self.capacity = max(0, capacity)
        self.min_tokens = max(0, min_tokens)
        while len(self._lru) > self.capacity:
            self._lru.popitem(last=False)

    def lookup_and_write(
        self,
        namespace: str,
        tokens: Sequence[str],
        boundaries: Sequence[int],
        breakpoints: Sequence[int],
    ) -> tuple[int, int]:
        """(tokens read, tokens written) for one prompt; (0, 0) without a breakpoint long
        enough to cache."""
        marks = [mark for mark in breakpoints if mark >= self.min_tokens and mark > 0]
        if not marks or self.capacity == 0:
            return 0, 0
        last = max(marks)
        keys: dict[int, int] = {}
        key = hash(namespace)
        start = 0
        for end in sorted({*(b for b in boundaries if 0 < b <= last), *marks}):
            key = hash((key, *tokens[start:end]))
            keys[end] = key
            start = end
        lru = self._lru
        read = max((end for end, key in keys.items() if key in lru), default=0)
        for mark in marks:
            lru[keys[mark]] = None
            lru.move_to_end(keys[mark])
        for end, key in keys.items():
            if end <= read and key in lru:
                lru.move_to_end(key)
        while len(lru) > self.capacity:
            lru.popitem(last=False)
        return read, last - read


@dataclass(frozen=True, slots=True)
class LatencyPlan:
    """When each token of one response is due, in ms from the request's arrival."""

    first_token_ms: float
    decode_ms_per_token: float
    is_straggler: bool = False

    def token_due_ms(self, token_index: int) -> float:
        return self.first_token_ms + token_index * self.decode_ms_per_token

    def total_ms(self, num_tokens: int) -> float:
        """Time until the last of `num_tokens` tokens (the first token if there are none)."""
        return self.token_due_ms(max(0, num_tokens - 1))


ZERO_LATENCY_PLAN = LatencyPlan(first_token_ms=0.0, decode_ms_per_token=0.0)


def ttft_ms(config: SimConfig, num_prompt_tokens: int, num_cached_tokens: int) -> float:
    """Time to first token before jitter and network: base + prefill of cached/uncached tokens."""
    num_prompt = max(0, num_prompt_tokens)
    num_cached = min(max(0, num_cached_tokens), num_prompt)
    # Every token at the full price, less what each cached one saves: written this way, more
    # cached tokens can never round to a slower first token (the sum of the two prices per
    # part could, by one ulp, when the cached price equals the full one).
    saved_ms_per_token = config.prefill_ms_per_token - config.prefill_cached_ms_per_token
    return config.ttft_base_ms + (
        config.prefill_ms_per_token * num_prompt - saved_ms_per_token * num_cached
    )


def jitter_factor(rng: random.Random, sigma: float) -> float:
    """Log-normal multiplier with median 1; exactly 1 (and no RNG draw) when sigma is 0."""
    if sigma <= 0:
        return 1.0
    return rng.lognormvariate(0.0, sigma)


def plan_latency(
    config: SimConfig,
    rng: random.Random,
    num_prompt_tokens: int,
    num_cached_tokens: int,
    *,
    first_token_override_ms: float | None = None,
    decode_override_ms: float | None = None,
) -> LatencyPlan:
    """Draws one request's pacing. Overrides are exact: no jitter or straggler applies to them."""
    is_straggler = config.straggler_prob > 0 and rng.random() < config.straggler_prob
    slowdown = config.straggler_mult if is_straggler else 1.0
    if first_token_override_ms is not None:
        first_token = first_token_override_ms
    else:
        first_token = config.rtt_ms + ttft_ms(config, num_prompt_tokens, num_cached_tokens)
        if first_token > 0:
            first_token *= jitter_factor(rng, config.jitter_sigma) * slowdown
    if decode_override_ms is not None:
        decode = decode_override_ms
    else:
        decode = config.decode_ms_per_token * slowdown
        if decode > 0:
            decode *= jitter_factor(rng, config.jitter_sigma)
    return LatencyPlan(first_token, decode, is_straggler)

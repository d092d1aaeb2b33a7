"""The mutable runtime state of one simulator app: config, RNG, prefix cache and counters.

It lives on the app instance (never at module level) so several simulators can share a process.
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict

from hasten.simulator.config import SimConfig
from hasten.simulator.latency import BreakpointCache, PrefixCache
from hasten.simulator.response_store import ResponseStore
from hasten.simulator.stats import SimStats

# Callers (trace id, parent span) whose sendings are counted for draw_by = "trace": the
# oldest are forgotten past this many (a forgotten caller's next sending counts as its first).
MAX_TRACED_CALLERS = 65_536


class SimState:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self._num_sent: OrderedDict[tuple[bytes, bytes], int] = OrderedDict()
        self.prefix_cache = PrefixCache(config.prefix_block_tokens, config.prefix_cache_blocks)
        # The Messages API's cache (written at cache_control breakpoints only) and the
        # Responses API's stored answers.
        self.breakpoint_cache = BreakpointCache(
            config.prefix_cache_blocks, config.messages_cache_min_tokens
        )
        self.responses = ResponseStore(config.response_store_bytes)
        self.stats = SimStats()
        self._num_ids = 0
        # A 5xx burst (POST /sim/burst): the next this many requests fail with burst_status.
        self.num_burst_left = 0
        self.burst_status = 500

    def next_id(self, prefix: str) -> str:
        self._num_ids += 1
        return f"{prefix}-sim{self._num_ids:012x}"

    def next_response_id(self) -> str:
        """``resp_`` and 48 hex digits, as OpenAI's look (the last ones count)."""
        self._num_ids += 1
        return f"resp_5e{self._num_ids:046x}"

    def next_message_id(self) -> str:
        """``msg_01`` and 22 characters, as Anthropic's look (the last ones count)."""
        self._num_ids += 1
        return f"msg_01Sim{self._num_ids:019d}"

    def latency_rng(self, trace: tuple[bytes, bytes] | None) -> random.Random:
        """Where a request's latency is drawn from (``SimConfig.draw_by``): the shared stream,
        or one seeded by the seed, the trace id and how many times this caller sent it."""
        if self.config.draw_by != "trace" or trace is None:
            return self.rng
        num_sent = self._num_sent.pop(trace, 0) + 1
        self._num_sent[trace] = num_sent
        if len(self._num_sent) > MAX_TRACED_CALLERS:
            self._num_sent.popitem(last=False)
        material = b"%d:%s:%d" % (self.config.seed, trace[0], num_sent)
        return random.Random(int.from_bytes(hashlib.blake2b(material, digest_size=8).digest()))

    def arm_burst(self, num_requests: int, status: int) -> None:
        self.num_burst_left = num_requests
        self.burst_status = status

    def take_burst(self) -> int | None:
        """The status the next request fails with while a burst lasts, else None."""
        if self.num_burst_left <= 0:
            return None
        self.num_burst_left -= 1
        return self.burst_status

    def apply_config(self, config: SimConfig) -> None:
        """Swaps settings at runtime; requests already running keep their drawn plan."""
        old = self.config
        self.config = config
        if config.seed != old.seed:
            self.rng.seed(config.seed)
        if config.prefix_block_tokens != old.prefix_block_tokens:
            # Keys of a different block size can never match again: start empty.
            self.prefix_cache = PrefixCache(config.prefix_block_tokens, config.prefix_cache_blocks)
        else:
            self.prefix_cache.resize(config.prefix_cache_blocks)
        self.breakpoint_cache.resize(config.prefix_cache_blocks, config.messages_cache_min_tokens)
        self.responses.resize(config.response_store_bytes)

    def reset(self, *, clear_prefix_cache: bool) -> None:
        """Zeroes counters, ends a burst and reseeds the RNG so a run replays the same faults."""
        self.stats.reset()
        self.num_burst_left = 0
        self.rng.seed(self.config.seed)
        self._num_sent.clear()
        if clear_prefix_cache:
            self.prefix_cache.clear()
            self.breakpoint_cache.clear()

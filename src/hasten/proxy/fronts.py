"""What a request body resolves to, kept for the next request with the same bytes.

A repeated request is what the exact cache answers, and clients repeat requests byte for
byte: the same SDK serialises the same messages the same way. Everything the gateway
derives from the body alone (the parsed and validated JSON, the route, the parameter
policy's rewrite, the cache decision without Cache-Control, the cache keys) depends only
on the endpoint, the tenant, those bytes and the config, which does not change while the
gateway runs. ``FrontMemo`` keeps that work for the most recent bodies, so a repeat skips
parsing, validation, the policy and both key digests: about a third of an exact hit's own
work before its answer is sent.

What depends on the caller or the request's headers (the key's allowed models and limits,
Cache-Control, the headers forwarded upstream) is still checked on every request. A body
that fails validation is never kept, so it is refused again in full each time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasten.cache import CacheDecision
from hasten.routing.models import ResolvedModel

# Bounds on what one gateway keeps, whatever its clients send: bodies up to
# MAX_BODY_BYTES, at most MAX_ENTRIES of them and MAX_BYTES of body bytes in all. A parsed
# chat body takes up to ~10x its bytes in objects (a dict per tiny message), so a memo full
# of hostile bodies holds ~20 MB; typical ones (0.2-2 KB) fit by the thousand.
MAX_BODY_BYTES = 16 * 1024
MAX_ENTRIES = 2048
MAX_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Front:
    """One body's parsed, checked and resolved form (shared by its repeats: never mutated)."""

    body: dict[str, Any]  # after the parameter policy, if one changed it
    model: ResolvedModel
    extra_headers: tuple[tuple[bytes, bytes], ...]  # the policy's header, if any
    is_rewritten: bool  # a parameter policy changed the body
    is_stream: bool
    wants_usage: bool  # a stream with stream_options.include_usage
    is_assembled: bool  # asked upstream as a stream, answered as one body
    decision: CacheDecision  # for a request without Cache-Control
    # (request key, stored key) when the decision looks up or stores, for the decision's
    # namespace; None otherwise (then derived per request if Cache-Control asks to cache).
    keys: tuple[str, str] | None
    # The request as chat (``Api.chat_view``): the semantic tier's question, the body itself
    # for chat; None without a semantic tier (nobody else reads it).
    chat_view: Mapping[str, Any] | None = None


_Key = tuple[str, str, bytes]


class FrontMemo:
    """The fronts of the most recently used bodies, per endpoint and tenant."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self._fronts: OrderedDict[_Key, Front] = OrderedDict()
        self._size_bytes = 0

    def __len__(self) -> int:
        return len(self._fronts)

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def get(self, endpoint: str, tenant: str, raw: bytes) -> Front | None:
        """The front of these exact bytes, if kept; marks it most recently used."""
        key = (endpoint, tenant, raw)
        front = self._fronts.get(key)
        if front is not None:
            self._fronts.move_to_end(key)
        return front

    def put(self, endpoint: str, tenant: str, raw: bytes, front: Front) -> bool:
        """Keeps ``front`` unless the body is over ``max_body_bytes``; evicts the least
        recently used fronts past the bounds."""
        num_bytes = len(raw)
        if num_bytes > self.max_body_bytes or self.max_entries <= 0:
            return False
        key = (endpoint, tenant, raw)
        old = self._fronts.pop(key, None)
        if old is not None:
            self._size_bytes -= num_bytes
        self._fronts[key] = front
        self._size_bytes += num_bytes
        while len(self._fronts) > self.max_entries or self._size_bytes > self.max_bytes:
            (_, _, evicted), _ = self._fronts.popitem(last=False)
            self._size_bytes -= len(evicted)
        return True

"""The request path's memory of resolved key digests (pure: time is an argument).

A known digest is trusted for ``ttl_s``, then looked up again, so a key revoked or rotated
through any replica stops working on every replica within ``ttl_s`` (the fleet has no
invalidation channel to miss: the TTL is the whole rule). An unknown digest is remembered
as unknown for as long, in a separate LRU bounded by ``max_unknown``: a client sending
random bearer tokens costs one store lookup per token, never unbounded memory. An expired
known entry is kept (up to ``max_known``, least recently used out first) for ``stale``:
with the store away, a key this replica already knew keeps working.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from hasten.values.caller import Caller

DEFAULT_TTL_S = 1.0
DEFAULT_MAX_KNOWN = 100_000
DEFAULT_MAX_UNKNOWN = 10_000


@dataclass(frozen=True, slots=True)
class Cached:
    """A lookup's answer: ``caller`` None is a digest known to be no key."""

    caller: Caller | None


class ResolvedKeys:
    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_known: int = DEFAULT_MAX_KNOWN,
        max_unknown: int = DEFAULT_MAX_UNKNOWN,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_known = max_known
        self.max_unknown = max_unknown
        self._known: OrderedDict[bytes, tuple[Caller, float]] = OrderedDict()
        self._unknown: OrderedDict[bytes, float] = OrderedDict()

    def fresh(self, digest: bytes, now_s: float) -> Cached | None:
        """What is known of ``digest`` and still fresh; None: ask the store."""
        known = self._known.get(digest)
        if known is not None:
            if now_s < known[1]:
                self._known.move_to_end(digest)
                return Cached(known[0])
            return None
        expires_s = self._unknown.get(digest)
        if expires_s is not None:
            if now_s < expires_s:
                return Cached(None)
            del self._unknown[digest]
        return None

    def stale(self, digest: bytes) -> Caller | None:
        """The caller last resolved for ``digest``, however old (the store is away)."""
        known = self._known.get(digest)
        return None if known is None else known[0]

    def remember(self, digest: bytes, caller: Caller | None, now_s: float) -> None:
        expires_s = now_s + self.ttl_s
        if caller is None:
            self._known.pop(digest, None)
            self._unknown[digest] = expires_s
            self._unknown.move_to_end(digest)
            while len(self._unknown) > self.max_unknown:
                self._unknown.popitem(last=False)
            return
        self._unknown.pop(digest, None)
        self._known[digest] = (caller, expires_s)
        self._known.move_to_end(digest)
        while len(self._known) > self.max_known:
            self._known.popitem(last=False)

    def forget(self, digest: bytes) -> None:
        """Drops ``digest`` (this replica's own admin change is seen at once)."""
        self._known.pop(digest, None)
        self._unknown.pop(digest, None)

    @property
    def num_known(self) -> int:
        return len(self._known)

    @property
    def num_unknown(self) -> int:
        return len(self._unknown)

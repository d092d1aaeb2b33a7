"""The limits counted in Redis for the whole fleet: ``hasten.limits.scripts`` run through
the fleet's ``FleetLink``.

A failure marks Redis away (``FleetLink`` logs the one warning of an outage) and raises
``FleetUnavailable``; the limiter then counts on the replica until Redis is back.
"""

from __future__ import annotations

from collections.abc import Sequence

from hasten.fleet.link import FleetLink
from hasten.limits.ledger import Verdict
from hasten.limits.scripts import ADMIT, REDATE, RENEW, SETTLE
from hasten.limits.spec import KeyLimits

REDIS_CLOCK = -1.0  # ``now_ms`` for "Redis's own TIME"
_NONE = "-1"


class SharedLedger:
    """Admits, settles and renews requests against the keys' counts in Redis."""

    def __init__(self, link: FleetLink) -> None:
        self.link = link
        self._admit = link.client.register_script(ADMIT)
        self._settle = link.client.register_script(SETTLE)
        self._renew = link.client.register_script(RENEW)
        self._redate = link.client.register_script(REDATE)

    def keys(self, key_id: str) -> tuple[str, str, str, str]:
        """(requests, tokens, slots, budget); the hash tag keeps one key's on one shard."""
        tag = "{" + key_id + "}"
        return tuple(  # type: ignore[return-value]
            self.link.key("limits", tag, part) for part in ("rpm", "tpm", "slots", "budget")
        )

    async def admit(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        num_tokens: int,
        slot_lease_ms: float,
        now_ms: float = REDIS_CLOCK,
    ) -> Verdict:
        args = [
            repr(now_ms),
            request_id,
            _limit(limits.requests_per_minute),
            _limit(limits.tokens_per_minute),
            str(num_tokens),
            _limit(limits.max_concurrent),
            repr(slot_lease_ms),
            _NONE if limits.budget_usd is None else repr(float(limits.budget_usd)),
            repr(limits.budget_period_s * 1000.0),
        ]
        keys = self.keys(key_id)
        reply = await self.link.run(
            "limits.admit", lambda r: self._admit(keys=keys, args=args, client=r)
        )
        denied_by, retry, req_left, req_reset, tok_left, tok_reset = (
            v.decode() if isinstance(v, bytes) else str(v) for v in reply
        )
        return Verdict(
            not denied_by,
            denied_by or None,
            float(retry),
            int(float(req_left)),
            float(req_reset),
            int(float(tok_left)),
            float(tok_reset),
        )

    async def settle(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        token_delta: int,
        cost_usd: float,
        now_ms: float = REDIS_CLOCK,
    ) -> None:
        _, tokens, slots, budget = self.keys(key_id)
        args = [
            repr(now_ms),
            request_id,
            _limit(limits.tokens_per_minute),
            str(token_delta),
            _NONE if limits.budget_usd is None else repr(float(limits.budget_usd)),
            repr(limits.budget_period_s * 1000.0),
            repr(float(cost_usd)),
        ]
        await self.link.run(
            "limits.settle",
            lambda r: self._settle(keys=[tokens, slots, budget], args=args, client=r),
        )

    async def renew(
        self,
        held: Sequence[tuple[str, str]],
        slot_lease_ms: float,
        now_ms: float = REDIS_CLOCK,
    ) -> None:
        """Extends the slots of live requests: ``held`` is (key id, request id) pairs."""
        if not held:
            return
        keys = [self.keys(key_id)[2] for key_id, _ in held]
        args = [repr(now_ms), repr(slot_lease_ms), *(request for _, request in held)]
        await self.link.run("limits.renew", lambda r: self._renew(keys=keys, args=args, client=r))

    async def redate(
        self, key_id: str, request_id: str, ago_ms: float, now_ms: float = REDIS_CLOCK
    ) -> None:
        """Moves an admitted request's time in the request window to ``ago_ms`` before now
        (if it is still there)."""
        keys = [self.keys(key_id)[0]]
        args = [repr(now_ms), request_id, repr(max(0.0, ago_ms))]
        await self.link.run("limits.redate", lambda r: self._redate(keys=keys, args=args, client=r))

    async def forget(self, key_id: str, request_id: str) -> None:
        """Takes an admitted request that never ran out of the request window."""
        key = self.keys(key_id)[0]
        await self.link.run("limits.forget", lambda r: r.zrem(key, request_id))


def _limit(value: int | None) -> str:
    return _NONE if value is None else str(value)

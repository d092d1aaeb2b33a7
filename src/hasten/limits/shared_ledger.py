"""The limits counted in Redis for the whole fleet: ``hasten.limits.scripts`` run through
the fleet's ``FleetLink``.

A failure marks Redis away (``FleetLink`` logs the one warning of an outage) and raises
``FleetUnavailable``; the limiter then counts on the replica until Redis is back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.fleet.resp import LuaScript, ScriptRun
from hasten.limits.ledger import Verdict
from hasten.limits.scripts import ADMIT, FORGET, REDATE, RENEW, SETTLE

_ADMIT, _SETTLE, _RENEW = LuaScript(ADMIT), LuaScript(SETTLE), LuaScript(RENEW)
_REDATE, _FORGET = LuaScript(REDATE), LuaScript(FORGET)
REDIS_CLOCK = -1.0  # ``now_ms`` for "Redis's own TIME"
_NONE = "-1"


@dataclass(frozen=True, slots=True)
class Settlement:
    """A finished request's correction: its usage minus what it reserved, its cost, and
    its slot (``request_id``: the request's own, or the ticket's it was admitted from)."""

    request_id: str
    limits: KeyLimits
    token_delta: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Grant:
    """A request to admit ahead of time (a ticket): its id and the tokens it reserves (a
    ticket reserves no budget: a key with a budget gets none, hasten.limits.tickets)."""

    request_id: str
    num_tokens: int


@dataclass(slots=True)
class FollowUp:
    """One key's bookkeeping after its requests, sent to Redis in one round trip."""

    settlements: list[Settlement]
    redates: list[tuple[str, float]]  # (window member, ago_ms)
    forgets: list[str]  # window members of requests that never ran
    grants: list[Grant]

    def __bool__(self) -> bool:
        return bool(self.settlements or self.redates or self.forgets or self.grants)


class SharedLedger:
    """Admits, settles and renews requests against the keys' counts in Redis."""

    def __init__(self, link: FleetLink) -> None:
        self.link = link

    def keys(self, key_id: str) -> tuple[str, str, str, str, str]:
        """(requests, tokens, slots, budget, reserved budget); the hash tag keeps one key's
        on one shard."""
        tag = "{" + key_id + "}"
        parts = ("rpm", "tpm", "slots", "budget", "reserved")
        return tuple(self.link.key("limits", tag, part) for part in parts)  # type: ignore[return-value]

    async def admit(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        num_tokens: int,
        slot_lease_ms: float,
        now_ms: float = REDIS_CLOCK,
        reserve_usd: float = 0.0,
    ) -> Verdict:
        args = _admit_args(limits, request_id, num_tokens, slot_lease_ms, now_ms, reserve_usd)
        (reply,) = await self.link.scripts("limits.admit", [(_ADMIT, self.keys(key_id), args)])
        return _verdict(reply)

    async def settle(
        self,
        key_id: str,
        limits: KeyLimits,
        request_id: str,
        token_delta: int,
        cost_usd: float,
        now_ms: float = REDIS_CLOCK,
    ) -> None:
        settlement = Settlement(request_id, limits, token_delta, cost_usd)
        await self.link.scripts("limits.settle", [self._settle_run(key_id, settlement, now_ms)])

    async def renew(
        self,
        held: Sequence[tuple[str, str]],
        slot_lease_ms: float,
        now_ms: float = REDIS_CLOCK,
    ) -> None:
        """Extends the slots and budget reservations of live requests: ``held`` is
        (key id, request id) pairs."""
        if not held:
            return
        keys: list[str] = []
        for key_id, _ in held:
            _, _, slots, _, reserved = self.keys(key_id)
            keys += (slots, reserved)
        args = [repr(now_ms), repr(slot_lease_ms), *(request for _, request in held)]
        await self.link.scripts("limits.renew", [(_RENEW, keys, args)])

    async def follow_up(
        self,
        key_id: str,
        limits: KeyLimits,
        work: FollowUp,
        slot_lease_ms: float,
        now_ms: float = REDIS_CLOCK,
    ) -> list[Verdict]:
        """Settles, re-dates and forgets, then admits ``work.grants`` under ``limits``: one
        pipelined round trip; the grants' verdicts in order."""
        keys = self.keys(key_id)
        runs: list[ScriptRun] = [self._settle_run(key_id, s, now_ms) for s in work.settlements]
        runs += [self._redate_run(key_id, member, ago, now_ms) for member, ago in work.redates]
        if work.forgets:
            runs.append((_FORGET, [keys[0]], work.forgets))
        num_before = len(runs)
        for grant in work.grants:
            args = _admit_args(limits, grant.request_id, grant.num_tokens, slot_lease_ms, now_ms)
            runs.append((_ADMIT, keys, args))
        # After the answers: rides with the next request's command when one comes at once.
        replies = await self.link.scripts("limits.follow_up", runs, is_deferred=True)
        return [_verdict(reply) for reply in replies[num_before:]]

    def _settle_run(self, key_id: str, settlement: Settlement, now_ms: float) -> ScriptRun:
        _, tokens, slots, budget, reserved = self.keys(key_id)
        return (_SETTLE, [tokens, slots, budget, reserved], _settle_args(settlement, now_ms))

    def _redate_run(self, key_id: str, member: str, ago_ms: float, now_ms: float) -> ScriptRun:
        args = [repr(now_ms), member, repr(max(0.0, ago_ms))]
        return (_REDATE, [self.keys(key_id)[0]], args)


def _admit_args(
    limits: KeyLimits,
    request_id: str,
    num_tokens: int,
    slot_lease_ms: float,
    now_ms: float,
    reserve_usd: float = 0.0,
) -> list[str]:
    return [
        repr(now_ms),
        request_id,
        _limit(limits.requests_per_minute),
        _limit(limits.tokens_per_minute),
        str(num_tokens),
        _limit(limits.max_concurrent),
        repr(slot_lease_ms),
        _NONE if limits.budget_usd is None else repr(float(limits.budget_usd)),
        repr(limits.budget_period_s * 1000.0),
        repr(float(reserve_usd)),
    ]


def _settle_args(settlement: Settlement, now_ms: float) -> list[str]:
    limits = settlement.limits
    return [
        repr(now_ms),
        settlement.request_id,
        _limit(limits.tokens_per_minute),
        str(settlement.token_delta),
        _NONE if limits.budget_usd is None else repr(float(limits.budget_usd)),
        repr(limits.budget_period_s * 1000.0),
        repr(float(settlement.cost_usd)),
    ]


def _verdict(reply: Sequence[bytes | str]) -> Verdict:
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


def _limit(value: int | None) -> str:
    return _NONE if value is None else str(value)

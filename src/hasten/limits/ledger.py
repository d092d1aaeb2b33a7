"""What one key has used, and whether the next request fits: the pure model of the limits.

Time is an argument (milliseconds, floats), so tests drive it by hand. The in-process
fallback (``hasten.limits.local``) keeps one ``KeyLedger`` per key; the Redis scripts
(``hasten.limits.scripts``) hold the same state in Redis and compute the same arithmetic,
step for step, so a replica with Redis and a replica without it decide alike.

- Requests per minute: a sliding-window log. Every admitted request's time is kept for one
  window; a request is admitted while fewer than the limit are in the last 60 s. Exact in
  every rolling minute (a burst of 100 on a 100/min key admits exactly 100).
- Tokens per minute: GCRA, a token bucket the size of the limit refilled continuously. A
  request's reservation (its prompt estimate plus its most output tokens) is taken on
  admission; ``settle`` moves the bucket by the difference to the answer's usage (a refund
  when the reservation was too high). A bucket is never owed more than one window: an
  answer far over its reservation locks the key for at most a minute, not for as many
  minutes as it overspent.
- Concurrent requests: slots named by request id, each with an expiry, so the slots of a
  replica that died without releasing them lapse on their own.
- Spend: the USD spent in the current budget period (periods are whole multiples of the
  period length since the Unix epoch), and the USD reserved by the requests in progress
  (named by request id, with an expiry like a slot); admitted while spent plus reserved is
  below the budget, charged and released afterwards. So concurrent requests cannot all
  pass a budget they would together exceed: the spend stays within the budget plus one
  request's reservation.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from hasten.config.limits import KeyLimits

WINDOW_MS = 60_000.0  # "per minute": both rate limits count over a rolling minute
# What denied a request, in the order ``Verdict.denied_by`` names the first one.
BUDGET, RESERVED, REQUESTS, TOKENS, TOO_LARGE, CONCURRENCY = (
    "budget",
    "budget_reserved",  # not spent, but reserved by requests in progress
    "requests",
    "tokens",
    "tokens_too_large",
    "concurrency",
)
# A concurrency (or reserved budget) denial cannot know when a slot (or a reservation)
# frees: clients are told to retry after this.
CONCURRENCY_RETRY_MS = 1000.0


@dataclass(slots=True)
class KeyLedger:
    """One key's usage: what the in-process fallback keeps (and Redis, in its own keys)."""

    request_times_ms: deque[float] = field(default_factory=deque)  # oldest first
    tat_ms: float = 0.0  # GCRA's theoretical arrival time of the token bucket
    slots: dict[str, float] = field(default_factory=dict)  # request id -> expiry (ms)
    budget_period: int = -1  # which period ``spent_usd`` belongs to
    spent_usd: float = 0.0
    # The budget reserved by requests in progress: request id -> (expiry (ms), USD).
    reserved: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a request was admitted, and what the x-ratelimit-* headers say after it."""

    is_allowed: bool
    denied_by: str | None  # None when allowed; else BUDGET, REQUESTS, TOKENS, ...
    retry_after_ms: float  # when a denied request could pass (0 when allowed)
    requests_remaining: int
    requests_reset_ms: float  # until the request window is empty again
    tokens_remaining: int
    tokens_reset_ms: float  # until the token bucket is full again


def admit(
    ledger: KeyLedger,
    limits: KeyLimits,
    now_ms: float,
    request_id: str,
    num_tokens: int,
    slot_lease_ms: float,
    reserve_usd: float = 0.0,
) -> Verdict:
    """Admits a request reserving ``num_tokens`` (and ``reserve_usd`` of a budget) if every
    limit allows it (then all are counted), or denies it and counts nothing."""
    times = ledger.request_times_ms
    while times and times[0] <= now_ms - WINDOW_MS:
        times.popleft()
    for request, expiry_ms in list(ledger.slots.items()):
        if expiry_ms <= now_ms:
            del ledger.slots[request]  # a lease that lapsed: its replica died holding it
    for request, (expiry_ms, _) in list(ledger.reserved.items()):
        if expiry_ms <= now_ms:
            del ledger.reserved[request]  # the same, for a reservation of the budget
    denied: list[tuple[str, float]] = []
    spent = ledger.spent_usd if ledger.budget_period == _period(now_ms, limits) else 0.0
    if limits.budget_usd is not None and spent >= limits.budget_usd:
        period_ms = limits.budget_period_s * 1000.0
        denied.append((BUDGET, (_period(now_ms, limits) + 1) * period_ms - now_ms))
    elif limits.budget_usd is not None and spent + reserved_usd(ledger) >= limits.budget_usd:
        denied.append((RESERVED, CONCURRENCY_RETRY_MS))
    rpm = limits.requests_per_minute
    if rpm is not None and len(times) >= rpm:
        denied.append((REQUESTS, (times[0] + WINDOW_MS - now_ms) if times else WINDOW_MS))
    tat_ms = max(ledger.tat_ms, now_ms)
    tpm = limits.tokens_per_minute
    new_tat_ms = tat_ms
    if tpm is not None:
        if tpm <= 0 or num_tokens > tpm:
            denied.append((TOO_LARGE, 0.0))  # would never fit: no retry helps
        else:
            new_tat_ms = tat_ms + num_tokens * (WINDOW_MS / tpm)
            if new_tat_ms - now_ms > WINDOW_MS:
                denied.append((TOKENS, new_tat_ms - WINDOW_MS - now_ms))
    max_concurrent = limits.max_concurrent
    if max_concurrent is not None and len(ledger.slots) >= max_concurrent:
        denied.append((CONCURRENCY, CONCURRENCY_RETRY_MS))
    if denied:
        retry_ms = max(after_ms for _, after_ms in denied)
        return _verdict(ledger, limits, now_ms, denied[0][0], retry_ms)
    if rpm is not None:
        times.append(now_ms)
    if tpm is not None:
        ledger.tat_ms = new_tat_ms
    if max_concurrent is not None:
        ledger.slots[request_id] = now_ms + slot_lease_ms
    if limits.budget_usd is not None and reserve_usd > 0:
        ledger.reserved[request_id] = (now_ms + slot_lease_ms, reserve_usd)
    return _verdict(ledger, limits, now_ms, None, 0.0)


def reserved_usd(ledger: KeyLedger) -> float:
    """The budget the requests in progress reserved, summed in request id order (as the
    Redis script sums it: the same floats in the same order, the same total)."""
    total = 0.0
    for _, (_, usd) in sorted(ledger.reserved.items()):
        total += usd
    return total


def settle(
    ledger: KeyLedger,
    limits: KeyLimits,
    now_ms: float,
    request_id: str,
    token_delta: int,
    cost_usd: float,
) -> None:
    """A finished request: its slot and budget reservation freed, the token reservation
    corrected by ``token_delta`` (usage minus the reservation; negative refunds), its cost
    charged. The bucket is never owed more than one window (``WINDOW_MS``)."""
    ledger.slots.pop(request_id, None)
    ledger.reserved.pop(request_id, None)
    tpm = limits.tokens_per_minute
    if tpm is not None and tpm > 0 and token_delta != 0:
        moved_ms = max(ledger.tat_ms, now_ms) + token_delta * (WINDOW_MS / tpm)
        ledger.tat_ms = min(max(moved_ms, now_ms), now_ms + WINDOW_MS)
    if limits.budget_usd is not None and cost_usd > 0:
        period = _period(now_ms, limits)
        if ledger.budget_period != period:
            ledger.budget_period, ledger.spent_usd = period, 0.0
        ledger.spent_usd += cost_usd


def renew(ledger: KeyLedger, request_id: str, expiry_ms: float) -> None:
    """Extends a live request's slot and budget reservation (a long stream outlives one
    lease)."""
    if request_id in ledger.slots:
        ledger.slots[request_id] = expiry_ms
    reserved = ledger.reserved.get(request_id)
    if reserved is not None:
        ledger.reserved[request_id] = (expiry_ms, reserved[1])


def _period(now_ms: float, limits: KeyLimits) -> int:
    return math.floor(now_ms / (limits.budget_period_s * 1000.0))


def _verdict(
    ledger: KeyLedger, limits: KeyLimits, now_ms: float, denied_by: str | None, retry_ms: float
) -> Verdict:
    times = ledger.request_times_ms
    rpm = limits.requests_per_minute or 0
    requests_reset_ms = (times[-1] + WINDOW_MS - now_ms) if times else 0.0
    tpm = limits.tokens_per_minute or 0
    tokens_reset_ms = max(ledger.tat_ms - now_ms, 0.0)
    tokens_remaining = 0
    if tpm > 0:
        tokens_remaining = math.floor((WINDOW_MS - tokens_reset_ms) / (WINDOW_MS / tpm))
    return Verdict(
        denied_by is None,
        denied_by,
        retry_ms,
        max(rpm - len(times), 0),
        requests_reset_ms,
        max(tokens_remaining, 0),
        tokens_reset_ms,
    )

"""The pure model of the limits: time passed by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hasten.config.limits import KeyLimits
from hasten.limits.ledger import (
    BUDGET,
    CONCURRENCY,
    CONCURRENCY_RETRY_MS,
    REQUESTS,
    RESERVED,
    TOKENS,
    TOO_LARGE,
    WINDOW_MS,
    KeyLedger,
    admit,
    renew,
    settle,
)

LEASE_MS = 30_000.0
T0_MS = 1_700_000_000_000.0


def test_a_burst_admits_exactly_the_requests_per_minute() -> None:
    book, limits = KeyLedger(), KeyLimits(requests_per_minute=100)
    verdicts = [admit(book, limits, T0_MS + i, f"r{i}", 1, LEASE_MS) for i in range(300)]
    assert sum(v.is_allowed for v in verdicts) == 100
    assert [v.requests_remaining for v in verdicts[:3]] == [99, 98, 97]
    denied = verdicts[100]
    assert denied.denied_by == REQUESTS
    # The oldest request leaves the window first: then one more fits.
    assert denied.retry_after_ms == WINDOW_MS - 100
    assert admit(book, limits, T0_MS + WINDOW_MS - 1, "late", 1, LEASE_MS).is_allowed is False
    assert admit(book, limits, T0_MS + WINDOW_MS, "next", 1, LEASE_MS).is_allowed is True


def test_a_denied_request_counts_nothing() -> None:
    book = KeyLedger()
    limits = KeyLimits(requests_per_minute=1, tokens_per_minute=1000, max_concurrent=5)
    assert admit(book, limits, T0_MS, "a", 10, LEASE_MS).is_allowed
    before = (list(book.request_times_ms), book.tat_ms, dict(book.slots))
    assert not admit(book, limits, T0_MS + 1, "b", 10, LEASE_MS).is_allowed
    assert (list(book.request_times_ms), book.tat_ms, dict(book.slots)) == before


def test_tokens_are_reserved_then_corrected_by_usage() -> None:
    book, limits = KeyLedger(), KeyLimits(tokens_per_minute=600)
    first = admit(book, limits, T0_MS, "a", 100, LEASE_MS)
    assert first.is_allowed and first.tokens_remaining == 500
    # The answer used 400 tokens (300 more than reserved): the bucket holds 200 now.
    settle(book, limits, T0_MS, "a", 300, 0.0)
    assert admit(book, limits, T0_MS, "b", 300, LEASE_MS).denied_by == TOKENS
    second = admit(book, limits, T0_MS, "c", 200, LEASE_MS)
    assert second.is_allowed and second.tokens_remaining == 0
    assert second.tokens_reset_ms == WINDOW_MS
    # 6 s later 60 tokens have come back.
    assert admit(book, limits, T0_MS + 6000, "d", 60, LEASE_MS).is_allowed


def test_a_refund_never_fills_the_bucket_past_its_size() -> None:
    book, limits = KeyLedger(), KeyLimits(tokens_per_minute=100)
    admit(book, limits, T0_MS, "a", 50, LEASE_MS)
    settle(book, limits, T0_MS, "a", -1000, 0.0)
    assert book.tat_ms == T0_MS
    assert admit(book, limits, T0_MS, "b", 101, LEASE_MS).denied_by == TOO_LARGE
    assert admit(book, limits, T0_MS, "c", 100, LEASE_MS).is_allowed


def test_a_request_over_the_whole_bucket_is_too_large_with_no_retry() -> None:
    verdict = admit(KeyLedger(), KeyLimits(tokens_per_minute=10), T0_MS, "a", 11, LEASE_MS)
    assert verdict.denied_by == TOO_LARGE and verdict.retry_after_ms == 0.0


def test_concurrency_slots_are_freed_by_settling_or_by_their_lease() -> None:
    book, limits = KeyLedger(), KeyLimits(max_concurrent=2)
    assert admit(book, limits, T0_MS, "a", 1, LEASE_MS).is_allowed
    assert admit(book, limits, T0_MS, "b", 1, LEASE_MS).is_allowed
    denied = admit(book, limits, T0_MS, "c", 1, LEASE_MS)
    assert denied.denied_by == CONCURRENCY and denied.retry_after_ms > 0
    settle(book, limits, T0_MS + 1, "a", 0, 0.0)
    assert admit(book, limits, T0_MS + 1, "c", 1, LEASE_MS).is_allowed
    # "b" and "c" belong to a replica that died: their leases lapse.
    renew(book, "c", T0_MS + 2 * LEASE_MS)  # ...unless renewed
    assert admit(book, limits, T0_MS + LEASE_MS + 1, "d", 1, LEASE_MS).is_allowed
    assert set(book.slots) == {"c", "d"}
    assert not admit(book, limits, T0_MS + LEASE_MS + 1, "e", 1, LEASE_MS).is_allowed
    assert admit(book, limits, T0_MS + 2 * LEASE_MS, "f", 1, LEASE_MS).is_allowed
    assert set(book.slots) == {"d", "f"}


def test_a_budget_is_checked_before_and_charged_after_per_period() -> None:
    limits = KeyLimits(budget_usd=1.0, budget_period_s=86_400.0)
    book = KeyLedger()
    period_ms = 86_400_000.0
    start_ms = 20_000 * period_ms
    assert admit(book, limits, start_ms, "a", 1, LEASE_MS).is_allowed
    settle(book, limits, start_ms + 5, "a", 0, 0.6)
    assert admit(book, limits, start_ms + 10, "b", 1, LEASE_MS).is_allowed
    settle(book, limits, start_ms + 20, "b", 0, 0.6)  # the last request may overspend
    denied = admit(book, limits, start_ms + 30, "c", 1, LEASE_MS)
    assert denied.denied_by == BUDGET
    assert denied.retry_after_ms == period_ms - 30
    assert admit(book, limits, start_ms + period_ms, "d", 1, LEASE_MS).is_allowed


def test_retry_after_is_the_longest_wait_of_every_limit_hit() -> None:
    book = KeyLedger()
    limits = KeyLimits(requests_per_minute=1, max_concurrent=1)
    admit(book, limits, T0_MS, "a", 1, LEASE_MS)
    denied = admit(book, limits, T0_MS + 10, "b", 1, LEASE_MS)
    assert denied.denied_by == REQUESTS
    assert denied.retry_after_ms == WINDOW_MS - 10


_steps = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=5000, allow_nan=False),  # ms since the last step
        st.integers(min_value=1, max_value=400),  # tokens reserved
        st.integers(min_value=-400, max_value=400),  # usage minus the reservation
        st.booleans(),  # settled at once, or left open
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=_steps,
    rpm=st.integers(min_value=0, max_value=20),
    tpm=st.integers(min_value=0, max_value=2000),
)
def test_no_rolling_minute_admits_more_than_the_limits(
    steps: list[tuple[float, int, int, bool]], rpm: int, tpm: int
) -> None:
    book, limits = KeyLedger(), KeyLimits(requests_per_minute=rpm, tokens_per_minute=tpm)
    now_ms = T0_MS
    admitted: list[tuple[float, int]] = []  # (time, tokens reserved)
    for i, (gap_ms, tokens, delta, is_settled) in enumerate(steps):
        now_ms += gap_ms
        verdict = admit(book, limits, now_ms, f"r{i}", tokens, LEASE_MS)
        in_window = [t for t, _ in admitted if t > now_ms - WINDOW_MS]
        if verdict.is_allowed:
            admitted.append((now_ms, tokens))
            assert len(in_window) + 1 <= rpm
            assert tokens <= tpm
            assert 0 <= verdict.requests_remaining == rpm - len(in_window) - 1
        else:
            assert verdict.denied_by is not None and verdict.retry_after_ms >= 0
        assert 0 <= verdict.tokens_remaining <= tpm
        assert 0 <= verdict.tokens_reset_ms <= WINDOW_MS + 400 * (WINDOW_MS / max(tpm, 1))
        if is_settled and verdict.is_allowed:
            settle(book, limits, now_ms, f"r{i}", max(delta, -tokens), 0.0)


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0, max_value=2000, allow_nan=False), max_size=80),
    tpm=st.integers(min_value=1, max_value=1000),
    tokens=st.integers(min_value=1, max_value=100),
)
def test_reserved_tokens_never_exceed_the_bucket_plus_its_refill(
    gaps: list[float], tpm: int, tokens: int
) -> None:
    """Without corrections, tokens admitted over any span fit the bucket plus its refill."""
    book, limits = KeyLedger(), KeyLimits(tokens_per_minute=tpm)
    now_ms, first_ms, total = T0_MS, T0_MS, 0
    for i, gap_ms in enumerate(gaps):
        now_ms += gap_ms
        if admit(book, limits, now_ms, f"r{i}", tokens, LEASE_MS).is_allowed:
            total += tokens
        assert total <= tpm + (now_ms - first_ms) * tpm / WINDOW_MS + 1e-6


def test_an_answer_far_over_its_reservation_locks_the_key_one_window_at_most() -> None:
    # Issue 41: 200 100 tokens used on a 2 000/min key locked it for 5 939 s.
    book, limits = KeyLedger(), KeyLimits(tokens_per_minute=2000)
    assert admit(book, limits, T0_MS, "a", 2000, LEASE_MS).is_allowed
    settle(book, limits, T0_MS, "a", 200_100 - 2000, 0.0)
    denied = admit(book, limits, T0_MS, "b", 100, LEASE_MS)
    assert denied.denied_by == TOKENS
    assert denied.retry_after_ms <= WINDOW_MS
    assert denied.tokens_reset_ms <= WINDOW_MS
    # A full window later the bucket is full again, whatever was overspent.
    assert admit(book, limits, T0_MS + WINDOW_MS, "c", 2000, LEASE_MS).is_allowed


def test_a_budget_counts_what_requests_in_progress_reserved() -> None:
    book, limits = KeyLedger(), KeyLimits(budget_usd=1.0)
    # Concurrent requests each reserve what they may cost: the third would pass a budget
    # the two before it may exhaust together.
    assert admit(book, limits, T0_MS, "a", 1, LEASE_MS, 0.4).is_allowed
    assert admit(book, limits, T0_MS, "b", 1, LEASE_MS, 0.4).is_allowed
    assert admit(book, limits, T0_MS, "c", 1, LEASE_MS, 0.4).is_allowed  # 0.8 < 1.0
    denied = admit(book, limits, T0_MS, "d", 1, LEASE_MS, 0.4)
    assert denied.denied_by == RESERVED and denied.retry_after_ms == CONCURRENCY_RETRY_MS
    # Settling frees a reservation and charges what was spent.
    settle(book, limits, T0_MS, "a", 0, 0.1)
    assert admit(book, limits, T0_MS, "e", 1, LEASE_MS, 0.4).is_allowed  # 0.1 + 0.8 < 1.0
    for request in ("b", "c", "e"):
        settle(book, limits, T0_MS, request, 0, 0.3)
    assert admit(book, limits, T0_MS, "f", 1, LEASE_MS, 0.4).denied_by == BUDGET  # 1.0 spent


@settings(max_examples=200, deadline=None)
@given(
    costs=st.lists(st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 1.0), st.booleans()), max_size=40)
)
def test_spend_stays_within_the_budget_plus_one_reservation(
    costs: list[tuple[float, float, bool]],
) -> None:
    """Any interleaving of admissions and settlements, each request costing at most what
    it reserved: the spend never passes the budget by more than one reservation."""
    book, limits, budget = KeyLedger(), KeyLimits(budget_usd=1.0), 1.0
    in_flight: list[tuple[str, float]] = []
    most_reserved = 0.0
    for i, (reserve, share, settles_one) in enumerate(costs):
        if settles_one and in_flight:
            request, reserved = in_flight.pop(0)
            settle(book, limits, T0_MS, request, 0, reserved * share)
        elif admit(book, limits, T0_MS, f"r{i}", 1, LEASE_MS, reserve).is_allowed:
            in_flight.append((f"r{i}", reserve))
            most_reserved = max(most_reserved, reserve)
    for request, reserved in in_flight:
        settle(book, limits, T0_MS, request, 0, reserved)  # the rest cost all they reserved
    assert book.spent_usd <= budget + most_reserved + 1e-9


def test_a_reservation_lapses_with_its_lease_and_is_renewed_with_its_slot() -> None:
    book, limits = KeyLedger(), KeyLimits(budget_usd=1.0)
    assert admit(book, limits, T0_MS, "dead", 1, LEASE_MS, 0.9).is_allowed
    assert admit(book, limits, T0_MS, "live", 1, LEASE_MS, 0.1).is_allowed
    renew(book, "live", T0_MS + 2 * LEASE_MS)
    assert admit(book, limits, T0_MS + 1, "x", 1, LEASE_MS, 0.1).denied_by == RESERVED
    # The dead replica's 0.9 lapsed; the live request's 0.1 is still held.
    assert admit(book, limits, T0_MS + LEASE_MS, "y", 1, LEASE_MS, 0.9).is_allowed
    assert admit(book, limits, T0_MS + LEASE_MS, "z", 1, LEASE_MS, 0.1).denied_by == RESERVED

"""What one gateway key is allowed: the limits the gateway enforces for it."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_BUDGET_PERIOD_S = 30 * 86_400.0  # a spend budget resets every 30 days by default


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """None means unlimited. Tokens count prompt and completion tokens together."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    budget_usd: float | None = None  # spend per period, priced from ``[prices]``
    budget_period_s: float = DEFAULT_BUDGET_PERIOD_S
    # Kept: a limited request looks its tickets up by its limits a few times, and a
    # dataclass's own hash would rebuild and hash the tuple of fields each time.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (
            self.requests_per_minute,
            self.tokens_per_minute,
            self.max_concurrent,
            self.budget_usd,
            self.budget_period_s,
        )
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_unlimited(self) -> bool:
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.max_concurrent is None
            and self.budget_usd is None
        )

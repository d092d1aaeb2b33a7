"""What one gateway key is allowed: the limits the gateway enforces for it."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BUDGET_PERIOD_S = 30 * 86_400.0  # a spend budget resets every 30 days by default


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """None means unlimited. Tokens count prompt and completion tokens together."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    budget_usd: float | None = None  # spend per period, priced from ``[prices]``
    budget_period_s: float = DEFAULT_BUDGET_PERIOD_S

    @property
    def is_unlimited(self) -> bool:
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.max_concurrent is None
            and self.budget_usd is None
        )

"""``[prices."<model>"]``: what a model's tokens cost, for gateway keys' spend budgets.

::

    [prices."gpt-4o-mini"]
    input_usd_per_1m_tokens = 0.15
    output_usd_per_1m_tokens = 0.60

    [prices."*"]          # any model without its own price
    input_usd_per_1m_tokens = 1.0
    output_usd_per_1m_tokens = 4.0

A request is priced by the model name the client asked for, else the name it resolved
to, else the upstream's model name, else ``"*"``; a model with no price costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hasten.config.reader import TomlTable

WILDCARD = "*"
TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True, slots=True)
class ModelPrice:
    input_usd_per_1m_tokens: float = 0.0
    output_usd_per_1m_tokens: float = 0.0

    def cost_usd(self, num_input_tokens: int, num_output_tokens: int) -> float:
        return (
            num_input_tokens * self.input_usd_per_1m_tokens
            + num_output_tokens * self.output_usd_per_1m_tokens
        ) / TOKENS_PER_PRICE_UNIT


def parse_prices(table: TomlTable) -> dict[str, ModelPrice]:
    """Every ``[prices.<model>]`` table; both prices default to 0 and must be >= 0."""
    prices = {}
    for name in table.data:
        model = table.table(name)
        prices[name] = ModelPrice(
            input_usd_per_1m_tokens=model.number("input_usd_per_1m_tokens", 0.0),
            output_usd_per_1m_tokens=model.number("output_usd_per_1m_tokens", 0.0),
        )
        model.finish()
    return prices


def price_of(prices: Mapping[str, ModelPrice], *names: str) -> ModelPrice | None:
    """The first of ``names`` with a price, else the wildcard's; None when unpriced."""
    for name in names:
        price = prices.get(name)
        if price is not None:
            return price
    return prices.get(WILDCARD)

"""Request counters, served on ``GET /stats`` (a tenant key sees only its own)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Stats:
    """How requests were answered, counted as they are (hit, miss, bypass, errors...)."""

    counts: Counter[str] = field(default_factory=Counter)
    # Only with gateway keys: their tenants are few and fixed, while pass-through tenants
    # (one per upstream key a client sends) would grow without bound.
    is_per_tenant: bool = False
    by_tenant: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, name: str, amount: int = 1, *, tenant: str | None = None) -> None:
        self.counts[name] += amount
        if tenant is not None and self.is_per_tenant:
            self.by_tenant.setdefault(tenant, Counter())[name] += amount

    def of_tenant(self, tenant: str) -> dict[str, int]:
        return dict(self.by_tenant.get(tenant, {}))

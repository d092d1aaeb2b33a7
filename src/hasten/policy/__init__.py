"""Parameter policies: per model route and per tenant, rules applied to a request's
parameters before it is cached or goes upstream (``max_tokens`` default and cap, ``n`` cap,
default ``stop``, fields dropped or set).

``config`` reads one ``policy`` table; ``decide`` combines policies and applies them to a
body (pure); ``book`` holds every combination, built once at startup.
"""

from __future__ import annotations

from hasten.config.policy_table import ParamPolicy, parse_policy
from hasten.policy.book import PolicyBook
from hasten.policy.decide import Applied, EffectivePolicy, apply_policy, combine
from hasten.proxy.ports import POLICY_HEADER

__all__ = [
    "POLICY_HEADER",
    "Applied",
    "EffectivePolicy",
    "ParamPolicy",
    "PolicyBook",
    "apply_policy",
    "combine",
    "parse_policy",
]

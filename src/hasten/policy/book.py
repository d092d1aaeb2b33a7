"""Every configured parameter policy, combined per (model route, tenant) once, at startup.

Built from the config and hung off the ``Gateway``; the request path asks it once per
chat or completions request (``PolicyBook.apply``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hasten.apis.api import ParamFields
from hasten.config.policy_table import ParamPolicy
from hasten.policy.decide import CHAT_FIELDS, Applied, EffectivePolicy, apply_policy, combine

# Embeddings have no max_tokens, n or stop, and a `set` meant for generation would break them.
_ENDPOINT_FIELDS = {"chat": CHAT_FIELDS, "completions": CHAT_FIELDS}


class PolicyBook:
    """The policies of each model route and of each tenant, combined for every pair."""

    def __init__(
        self,
        models: Mapping[str, ParamPolicy | None] | None = None,
        tenants: Mapping[str, ParamPolicy] | None = None,
    ) -> None:
        models, tenants = models or {}, tenants or {}
        # Routes and gateway-key tenants are fixed at startup, so every pair is built now and
        # a request only looks one up; a tenant with no policy of its own uses its route's.
        self._by_route = {name: combine(policy, None) for name, policy in models.items()}
        self._by_pair: dict[tuple[str | None, str], EffectivePolicy | None] = {
            (route, tenant): combine(None if route is None else models.get(route), policy)
            for tenant, policy in tenants.items()
            for route in (*models, None)
        }
        self.is_empty = not any(self._by_route.values()) and not any(self._by_pair.values())

    def policy_for(self, route: str, tenant: str) -> EffectivePolicy | None:
        """What holds for requests to ``route`` (the configured route's name) by ``tenant``."""
        if (route, tenant) in self._by_pair:
            return self._by_pair[route, tenant]
        if (None, tenant) in self._by_pair:  # a route with no policy of its own
            return self._by_pair[None, tenant]
        return self._by_route.get(route)

    def apply(
        self,
        body: dict[str, Any],
        endpoint: str,
        route: str,
        tenant: str,
        fields: ParamFields | None = None,
    ) -> Applied | None:
        """The rewritten body and its actions; None when no policy changed anything.
        ``fields``: where the request's API names what a policy rewrites (by default,
        chat's and completions'; an API without them, embeddings, is never rewritten)."""
        if fields is None:
            fields = _ENDPOINT_FIELDS.get(endpoint)
        if self.is_empty or fields is None or not fields.max_tokens:
            return None
        policy = self.policy_for(route, tenant)
        return None if policy is None else apply_policy(body, policy, fields)

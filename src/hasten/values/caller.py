"""Who sends a request (``Caller``: the operator's admin key, or one tenant's key with its
limits and models) and which models that key may call (pure): the rule for requests and
for ``GET /v1/models``.

A key limited to some models gets OpenAI's own answer for any other: 404
``model_not_found``, "The model `x` does not exist or you do not have access to it". The
same answer for a model that exists and one that does not tells a key nothing about the
models it may not use, and every OpenAI SDK already raises ``NotFoundError`` for it
(a 403 would be new to clients, and would confirm that the model exists).
A model is allowed if the key lists the name the client sent or the model it resolves to
(an alias of an allowed model is allowed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hasten.config.limits import KeyLimits
from hasten.errors import ModelNotFound


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the operator (admin key) or one tenant's namespace."""

    tenant: str | None  # None for the admin key, which belongs to no tenant
    key_id: str | None = None  # which gateway key, when keys are enforced
    limits: KeyLimits | None = None  # what that key may spend (hasten.limits)
    models: frozenset[str] | None = None  # the models it may call; None: any

    @property
    def is_admin(self) -> bool:
        return self.tenant is None


ADMIN = Caller(tenant=None)


def is_allowed(caller: Caller | None, requested: str, resolved: str) -> bool:
    models = None if caller is None else caller.models
    return models is None or requested in models or resolved in models


def check_model(caller: Caller | None, requested: str, resolved: str) -> None:
    """Raises OpenAI's 404 unless the caller's key may use this model."""
    if not is_allowed(caller, requested, resolved):
        raise ModelNotFound(
            f"The model `{requested}` does not exist or you do not have access to it.",
            param="model",
        )


def visible_models(
    items: Iterable[dict[str, Any]], caller: Caller | None, resolve: Callable[[str], str]
) -> list[dict[str, Any]]:
    """The ``/v1/models`` entries this caller may use (every one for an unlimited key);
    ``resolve`` names the model an entry's id resolves to (its alias target)."""
    if caller is None or caller.models is None:
        return list(items)
    return [
        item
        for item in items
        if isinstance(item.get("id"), str) and is_allowed(caller, item["id"], resolve(item["id"]))
    ]

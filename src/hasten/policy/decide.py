"""What the parameter policies do to one request. Pure: a body in, a body and actions out.

A model's policy and a tenant's combine into one ``EffectivePolicy`` (``combine``):

- caps: the lower one holds; a value above the cap of a policy with ``on_exceed =
  "reject"`` is refused (400), any other value above the lower cap is clamped to it;
- defaults (``default_max_tokens``, ``default_stop``): the tenant's, else the model's; a
  default never exceeds the cap that holds;
- ``drop`` and ``set``: both apply, the model's first, then the tenant's (so the tenant's
  ``set`` wins a field both name, and a field the tenant drops is dropped).

``apply_policy`` copies the body only when a rule changes it, so a request no rule
touches keeps the client's bytes; applying a policy to its own output changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from hasten.apis.api import ParamFields
from hasten.config.policy_table import ParamPolicy
from hasten.errors import InvalidRequest

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
# Chat's fields, the default: a body of another API names its own (``Api.param_fields``).
CHAT_FIELDS = ParamFields(MAX_TOKENS_FIELDS, "stop", "n")
# A value longer than this (a long string, a table) is named in the header but not shown.
MAX_SHOWN_VALUE_BYTES = 32
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class Cap:
    """A limit on an integer field: values above ``limit`` are clamped to it, unless
    they are also above ``reject_above`` (the lowest cap of a rejecting policy)."""

    limit: int
    reject_above: int | None = None

    @staticmethod
    def of(limit: int | None, is_reject: bool) -> Cap | None:
        return None if limit is None else Cap(limit, limit if is_reject else None)

    def lower(self, other: Cap | None) -> Cap:
        if other is None:
            return self
        rejects = [c for c in (self.reject_above, other.reject_above) if c is not None]
        return Cap(min(self.limit, other.limit), min(rejects) if rejects else None)


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """The rules that hold for one (model route, tenant) pair."""

    default_max_tokens: int | None = None
    max_tokens: Cap | None = None
    n: Cap | None = None
    default_stop: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    # (field, value, the action's text), in the order they are applied.
    set_fields: tuple[tuple[str, Any, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Applied:
    """A body some rule changed, and what each rule did (``max_tokens 4096->1024(cap)``)."""

    body: dict[str, Any]
    actions: tuple[str, ...]

    @property
    def header(self) -> bytes:
        """The ``x-hasten-policy`` value: the actions, comma-separated."""
        return ", ".join(self.actions).encode()


def combine(model: ParamPolicy | None, tenant: ParamPolicy | None) -> EffectivePolicy | None:
    """One model's and one tenant's policy as one; None when neither has a rule."""
    policies = [p for p in (model, tenant) if p is not None and not p.is_empty]
    if not policies:
        return None
    max_tokens = n = None
    default_max_tokens: int | None = None
    default_stop: tuple[str, ...] = ()
    set_fields: dict[str, Any] = {}
    dropped: dict[str, None] = {}
    for policy in policies:  # the model's, then the tenant's: the later default wins
        is_reject = policy.is_reject_on_exceed
        max_tokens = _lower(Cap.of(policy.max_tokens_cap, is_reject), max_tokens)
        n = _lower(Cap.of(policy.max_n, is_reject), n)
        default_max_tokens = policy.default_max_tokens or default_max_tokens
        default_stop = policy.default_stop or default_stop
        for name in policy.drop:
            set_fields.pop(name, None)
            dropped[name] = None
        for name, value in policy.set_fields.items():
            dropped.pop(name, None)
            set_fields[name] = value
    if default_max_tokens is not None and max_tokens is not None:
        default_max_tokens = min(default_max_tokens, max_tokens.limit)
    return EffectivePolicy(
        default_max_tokens=default_max_tokens,
        max_tokens=max_tokens,
        n=n,
        default_stop=default_stop,
        drop=tuple(dropped),
        set_fields=tuple((k, v, _set_action(k, v)) for k, v in set_fields.items()),
    )


def _lower(cap: Cap | None, other: Cap | None) -> Cap | None:
    return other if cap is None else cap.lower(other)


def _set_action(name: str, value: Any) -> str:
    shown = orjson.dumps(value)
    if len(shown) > MAX_SHOWN_VALUE_BYTES or not shown.isascii():
        return f"set {name}"
    return f"set {name}={shown.decode()}"


class _Edit:
    """The body, copied on its first change, and the actions that changed it."""

    __slots__ = ("actions", "body", "is_copied")

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.is_copied = False
        self.actions: list[str] = []

    def _own(self) -> dict[str, Any]:
        if not self.is_copied:
            self.body, self.is_copied = dict(self.body), True
        return self.body

    def put(self, name: str, value: Any, action: str) -> None:
        self._own()[name] = value
        self.actions.append(action)

    def pop(self, name: str, action: str) -> None:
        del self._own()[name]
        self.actions.append(action)


def apply_policy(
    body: dict[str, Any], policy: EffectivePolicy, fields: ParamFields = CHAT_FIELDS
) -> Applied | None:
    """``body`` as the policy rewrites it; None when no rule changed anything. ``fields``:
    where the body's API names its most output tokens, stop sequences and choices.

    Raises InvalidRequest (400, ``param`` named) for a value above a rejecting cap.
    ``body`` must have passed validation: the counted fields are integers >= 1 or absent.
    """
    edit = _Edit(body)
    for name in policy.drop:
        if name in body:
            edit.pop(name, f"drop {name}")
    for name, value, action in policy.set_fields:
        if not _is_same(body.get(name, _ABSENT), value):
            edit.put(name, value, action)
    default = policy.default_max_tokens
    limit_fields = fields.max_tokens
    if default is not None and limit_fields and all(body.get(f) is None for f in limit_fields):
        name = limit_fields[0]
        edit.put(name, default, f"{name}={default}(default)")
    if policy.max_tokens is not None:
        for name in limit_fields:
            _cap(edit, name, policy.max_tokens)
    if policy.n is not None and fields.n is not None:
        _cap(edit, fields.n, policy.n)
    # Validated as a string, a list or null: falsy is no stop sequence ("", [] or null).
    stop = fields.stop
    if policy.default_stop and stop is not None and not body.get(stop):
        edit.put(stop, list(policy.default_stop), f"{stop}(default)")
    if not edit.actions:
        return None
    return Applied(edit.body, tuple(edit.actions))


def _is_same(current: Any, wanted: Any) -> bool:
    # By type as well: `true` is not `1` to an upstream, though Python says they are equal.
    return type(current) is type(wanted) and bool(current == wanted)


def _cap(edit: _Edit, name: str, cap: Cap) -> None:
    value = edit.body.get(name)
    if not isinstance(value, int) or value <= cap.limit:
        return
    if cap.reject_above is not None and value > cap.reject_above:
        raise policy_refusal(name, value, cap.reject_above)
    edit.put(name, cap.limit, f"{name} {value}->{cap.limit}(cap)")


def policy_refusal(name: str, value: int, limit: int) -> InvalidRequest:
    """The 400 for a value above a rejecting cap; its header says which rule refused it."""
    error = InvalidRequest(
        f"Invalid '{name}': {value} is above {limit}, the most this gateway's policy "
        "allows for this model and API key.",
        param=name,
        code="policy_limit_exceeded",
    )
    error.headers["x-hasten-policy"] = f"{name} {value}>{limit}(reject)"
    return error

"""What a key's limits and allowed models may be: one set of checks for the static keys of
``[server] api_keys`` and for the admin API's virtual keys (pure; raises InvalidKeyField)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from hasten.config.limits import DEFAULT_BUDGET_PERIOD_S, KeyLimits
from hasten.errors import InvalidKeyField

MAX_REQUESTS_PER_MINUTE = 10**9
MAX_TOKENS_PER_MINUTE = 10**12
MAX_CONCURRENT = 10**6
MAX_BUDGET_USD = 1e9
MIN_BUDGET_PERIOD_S = 60.0
MAX_BUDGET_PERIOD_S = 366 * 86_400.0
MAX_MODELS_PER_KEY = 256
MAX_MODEL_NAME_CHARS = 256
ANY_MODEL = "*"  # in a key's models: every model, as without a list

LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent",
    "budget_usd",
    "budget_period",
    "budget_period_s",
)
_COUNTS = {
    "requests_per_minute": MAX_REQUESTS_PER_MINUTE,
    "tokens_per_minute": MAX_TOKENS_PER_MINUTE,
    "max_concurrent": MAX_CONCURRENT,
}
_PERIOD_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 7 * 86_400.0}
_PERIOD = re.compile(r"([0-9]{1,6})([smhdw])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def key_limits(values: Mapping[str, object]) -> KeyLimits:
    """Limits from their fields; an absent or null field is unlimited. The budget's period
    is ``budget_period`` ("30d", "7d", "12h", "90m", "3600s") or ``budget_period_s``."""
    unknown = sorted(set(values) - set(LIMIT_FIELDS))
    if unknown:
        raise InvalidKeyField(unknown[0], f"unknown limit (known: {', '.join(LIMIT_FIELDS)})")
    counts = {name: _count(values.get(name), name, most) for name, most in _COUNTS.items()}
    budget = values.get("budget_usd")
    budget_usd = None if budget is None else _budget(budget)
    period_s = _period_s(values.get("budget_period"), values.get("budget_period_s"))
    if period_s is not None and budget_usd is None:
        field = "budget_period" if values.get("budget_period") is not None else "budget_period_s"
        raise InvalidKeyField(field, "a budget period needs budget_usd")
    return KeyLimits(
        requests_per_minute=counts["requests_per_minute"],
        tokens_per_minute=counts["tokens_per_minute"],
        max_concurrent=counts["max_concurrent"],
        budget_usd=budget_usd,
        budget_period_s=DEFAULT_BUDGET_PERIOD_S if period_s is None else period_s,
    )


def key_models(value: object, field: str = "models") -> frozenset[str] | None:
    """The models a key may call; None (absent, or a list holding "*") means any."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise InvalidKeyField(field, "expected a list of model names")
    if not value:
        raise InvalidKeyField(field, "an empty list allows no model; omit it to allow every one")
    if len(value) > MAX_MODELS_PER_KEY:
        raise InvalidKeyField(field, f"at most {MAX_MODELS_PER_KEY} models, got {len(value)}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name or len(name) > MAX_MODEL_NAME_CHARS:
            raise InvalidKeyField(
                f"{field}[{i}]", f"expected a model name of 1 to {MAX_MODEL_NAME_CHARS} characters"
            )
        if _CONTROL.search(name):
            raise InvalidKeyField(f"{field}[{i}]", "control characters are not allowed")
    names = frozenset(value)
    return None if ANY_MODEL in names else names


def limits_dict(limits: KeyLimits) -> dict[str, int | float | None]:
    """The limits as the admin API shows them (the period only with a budget)."""
    return {
        "requests_per_minute": limits.requests_per_minute,
        "tokens_per_minute": limits.tokens_per_minute,
        "max_concurrent": limits.max_concurrent,
        "budget_usd": limits.budget_usd,
        "budget_period_s": limits.budget_period_s if limits.budget_usd is not None else None,
    }


def _count(value: object, field: str, most: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidKeyField(field, f"expected an integer, got {_shown(value)}")
    if not 1 <= value <= most:
        raise InvalidKeyField(field, f"must be between 1 and {most}, got {value}")
    return value


def _budget(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidKeyField("budget_usd", f"expected a number, got {_shown(value)}")
    budget = float(value)
    if not (math.isfinite(budget) and 0.0 < budget <= MAX_BUDGET_USD):
        raise InvalidKeyField("budget_usd", f"must be > 0 and <= {MAX_BUDGET_USD:g}")
    return budget


def _period_s(spelled: object, seconds: object) -> float | None:
    if spelled is not None and seconds is not None:
        raise InvalidKeyField("budget_period", "give budget_period or budget_period_s, not both")
    if spelled is not None:
        match = _PERIOD.fullmatch(spelled) if isinstance(spelled, str) else None
        if match is None:
            raise InvalidKeyField(
                "budget_period", f"expected e.g. '30d', '7d', '12h' or '90m', got {_shown(spelled)}"
            )
        return _checked_period(float(match[1]) * _PERIOD_UNITS_S[match[2]], "budget_period")
    if seconds is None:
        return None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise InvalidKeyField("budget_period_s", f"expected a number, got {_shown(seconds)}")
    return _checked_period(float(seconds), "budget_period_s")


def _checked_period(period_s: float, field: str) -> float:
    if not (math.isfinite(period_s) and MIN_BUDGET_PERIOD_S <= period_s <= MAX_BUDGET_PERIOD_S):
        raise InvalidKeyField(
            field,
            f"must be between {MIN_BUDGET_PERIOD_S:g} s and {MAX_BUDGET_PERIOD_S / 86_400:g} days",
        )
    return period_s


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"

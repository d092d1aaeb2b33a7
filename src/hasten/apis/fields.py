"""The 400s a request check raises, each naming its parameter, and the type tests they use.

Shared by ``responses.check_request`` and ``messages.check_request``; the parameter path
is the caller's (``input[2].content[0].text`` for OpenAI, ``messages.2.content.0.text`` for
Anthropic, as each API names them in its own errors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hasten.errors import InvalidRequest

Check = Callable[[Any], bool]
_MAX_SHOWN_CHARS = 60


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_text(value: Any) -> bool:
    """A non-empty string."""
    return isinstance(value, str) and value != ""


def is_object(value: Any) -> bool:
    return isinstance(value, dict)


def is_list(value: Any) -> bool:
    return isinstance(value, list)


def in_range(low: float, high: float) -> Check:
    return lambda value: is_number(value) and low <= value <= high


def int_at_least(low: int) -> Check:
    return lambda value: is_int(value) and value >= low


def one_of(*choices: str) -> Check:
    return lambda value: value in choices


def missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def invalid(param: str, what: str, value: Any) -> InvalidRequest:
    shown = repr(value)
    if len(shown) > _MAX_SHOWN_CHARS:
        shown = shown[: _MAX_SHOWN_CHARS - 3] + "..."
    return InvalidRequest(
        f"Invalid value for '{param}': expected {what}, got {shown}.",
        param=param,
        code="invalid_value",
    )


def require(data: Mapping[str, Any], name: str, check: Check, what: str, param: str) -> Any:
    """``data[name]``, which must be present, not null, and pass ``check``."""
    if data.get(name) is None:
        raise missing(param)
    value = data[name]
    if not check(value):
        raise invalid(param, what, value)
    return value


def optional(data: Mapping[str, Any], name: str, check: Check, what: str, param: str) -> Any:
    """``data[name]`` if present and not null (it must pass ``check``), else None."""
    value = data.get(name)
    if value is not None and not check(value):
        raise invalid(param, what, value)
    return value


@contextmanager
def translating(param: str) -> Iterator[None]:
    """Turns a shape a translator did not expect (a checked request can still hold one: a
    number where an object belongs, a field left out) into a 400 naming ``param``, never
    a 500."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise InvalidRequest(
            f"Invalid '{param}': a value of an unexpected type or a missing field "
            f"({type(exc).__name__}: {exc}).",
            param=param,
            code="invalid_value",
        ) from exc

"""A simulated tool call's arguments, shaped by the tool's JSON schema.

A real model fills a function's parameters; the simulator fills them deterministically, so a
client that validates the arguments (the OpenAI Agents SDK, LangChain, an agent's own
tools) accepts them: the generated words go into the first string property, every other
required property gets a fixed value of its type (an ``enum``'s first value, ``0``,
``false``, ``[]``, ``{}``, ``""``, ``null``). A tool whose schema names no properties
gets ``{"text": "<words>"}``, as before schemas were read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

_FIXED_BY_TYPE: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


@dataclass(frozen=True, slots=True)
class ArgumentFrame:
    """The JSON around the generated words: ``open + words + close``; with
    ``has_words`` False the arguments are ``open + close`` alone (no string property)."""

    open: str
    close: str
    has_words: bool = True


TEXT_FRAME = ArgumentFrame('{"text":"', '"}')


def _types(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    for option in schema.get("anyOf") or schema.get("oneOf") or ():
        if isinstance(option, Mapping):
            return _types(option)
    return []


def _fixed_value(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "const" in schema:
        return schema["const"]
    for kind in _types(schema):
        if kind in _FIXED_BY_TYPE:
            return _FIXED_BY_TYPE[kind]
    return None


def _is_free_string(schema: Any) -> bool:
    return (
        isinstance(schema, Mapping)
        and "string" in _types(schema)
        and not schema.get("enum")
        and "const" not in schema
        and not schema.get("format")  # a date or a URI would not be any words
        and not schema.get("pattern")
    )


def argument_frame(parameters: Any) -> ArgumentFrame:
    """The frame for a function whose parameters are the JSON schema ``parameters``."""
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return TEXT_FRAME
    required = parameters.get("required")
    names = [name for name in properties if isinstance(name, str)]
    wanted = set(required) if isinstance(required, list) else set()
    word_field = next((name for name in names if _is_free_string(properties[name])), None)
    fixed = {
        name: _fixed_value(properties[name])
        for name in names
        if name in wanted and name != word_field
    }
    if word_field is None:
        return ArgumentFrame(orjson.dumps(fixed).decode(), "", has_words=False)
    # The word field first, the fixed ones after it: {"city":"<words>","days":0}
    open_ = "{" + orjson.dumps(word_field).decode() + ':"'
    rest = orjson.dumps(fixed).decode()[1:-1]
    close = '"' + ("," + rest if rest else "") + "}"
    return ArgumentFrame(open_, close)

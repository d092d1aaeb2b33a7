"""Request validation: clear 400s that name the offending ``param``, before any upstream call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from hasten.errors import InvalidJSON, InvalidRequest

_NUMBER = (int, float)


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(body: dict[str, Any], param: str, check: Callable[[Any], bool], what: str) -> None:
    if param not in body:
        raise InvalidRequest(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    if not check(body[param]):
        raise _invalid(param, what, body[param])


def _optional(body: dict[str, Any], param: str, check: Callable[[Any], bool], what: str) -> None:
    value = body.get(param)
    if value is not None and not check(value):
        raise _invalid(param, what, value)


def _invalid(param: str, what: str, value: Any) -> InvalidRequest:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidRequest(
        f"Invalid type for '{param}': expected {what}, got {shown}.",
        param=param,
        code="invalid_type",
    )


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _check_messages(messages: list[Any]) -> None:
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _invalid(param, "an object", message)
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidRequest(
                f"Missing or invalid '{param}.role'.", param=f"{param}.role", code="invalid_type"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _invalid(f"{param}.content", "a string, an array or null", content)


def _check_sampling(body: dict[str, Any]) -> None:
    _optional(body, "stream", lambda v: isinstance(v, bool), "a boolean")
    _optional(body, "temperature", _is_number, "a number")
    _optional(body, "top_p", _is_number, "a number")
    _optional(body, "n", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "max_tokens", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "max_completion_tokens", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "seed", _is_int, "an integer")
    _optional(body, "stream_options", lambda v: isinstance(v, dict), "an object")
    _optional(body, "stop", lambda v: isinstance(v, str | list), "a string or an array")


def check_chat(body: dict[str, Any]) -> None:
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    _require(body, "messages", _is_message_list, "a non-empty array")
    _check_messages(body["messages"])
    _optional(body, "tools", lambda v: isinstance(v, list), "an array")
    _check_sampling(body)


def check_completion(body: dict[str, Any]) -> None:
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    _require(body, "prompt", lambda v: isinstance(v, str | list), "a string or an array")
    _check_sampling(body)


def check_embedding(body: dict[str, Any]) -> None:
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    _require(
        body,
        "input",
        lambda v: isinstance(v, str | list) and v != [],
        "a string or a non-empty array",
    )


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"We could not parse the JSON body of your request: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return body


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    path: str
    check: Callable[[dict[str, Any]], None]
    is_streamable: bool


CHAT = Endpoint("chat", "/chat/completions", check_chat, True)
COMPLETIONS = Endpoint("completions", "/completions", check_completion, True)
EMBEDDINGS = Endpoint("embeddings", "/embeddings", check_embedding, False)

"""Request validation: clear 400s that name the offending ``param``, before any upstream call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from hasten.config.tables import DEFAULT_MAX_JSON_DEPTH
from hasten.errors import InvalidJSON, InvalidRequest
from hasten.wire import exactjson

_T = TypeVar("_T")

_NUMBER = (int, float)
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1

_MAX_COUNTED_BYTES = 8192
# A body this large is parsed and checked on a worker thread: parsing 10 MB of tiny messages
# took the event loop ~0.5 s, and every other client waited for it.
OFF_LOOP_BYTES = 256 * 1024


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    """An integer parameter hasten reads (n, max_tokens, seed): one of 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and _MIN_INT <= value <= _MAX_INT


def _is_beyond_64_bits(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and not _is_int(value)


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
    if what.startswith("an integer") and _is_beyond_64_bits(value):
        return InvalidRequest(
            f"Invalid '{param}': the integer is out of range; it must fit in 64 bits "
            f"({_MIN_INT} to {_MAX_INT}).",
            param=param,
            code="integer_out_of_range",
        )
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


def parse_body(raw: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """The request's JSON object, nested at most ``max_depth`` levels (the object is one),
    every key written once, its integers exact whatever their size (``hasten.wire.exactjson``)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"We could not parse the JSON body of your request: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    # Each level needs its own bracket, so a body with few cannot be too deep; counting
    # them in C costs a small body less than walking it, a large one (long texts) more.
    if len(raw) > _MAX_COUNTED_BYTES or raw.count(b"[") + raw.count(b"{") > max_depth:
        _check_depth(body, max_depth)
    # Read as hasten reads it, forwarded as the client wrote it: a key written twice could
    # be read by the upstream the other way (the first value), so it is refused.
    found = exactjson.shape(body)
    duplicate = exactjson.duplicate_key(raw, found.num_keys)
    if duplicate is not None:
        shown = duplicate if len(duplicate) <= 60 else duplicate[:57] + "..."
        raise InvalidRequest(
            f"The key '{shown}' appears more than once in one object of the request body.",
            param=shown,
            code="duplicate_key",
        )
    try:
        exact: dict[str, Any] = exactjson.exact_integers(raw, body, found)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"We could not parse the JSON body of your request: {exc}") from None
    return exact


def check_num_items(body: dict[str, Any], endpoint: Endpoint, max_items: int) -> None:
    """Refuses more messages (prompts, inputs) than ``max_items`` in the endpoint's list."""
    param = endpoint.items_param
    items = None if param is None else body.get(param)
    if isinstance(items, list) and len(items) > max_items:
        raise InvalidRequest(
            f"'{param}' holds {len(items)} items; at most {max_items} are accepted.",
            param=param,
            code="too_many_items",
        )


_PARSER: ThreadPoolExecutor | None = None


async def off_loop(num_bytes: int, work: Callable[[], _T]) -> _T:
    """``work()`` (parsing and checking a body of ``num_bytes``): here for a small body, on
    the parser thread for a large one, so the event loop keeps serving other clients."""
    if num_bytes < OFF_LOOP_BYTES:
        return work()
    global _PARSER
    if _PARSER is None:
        # One thread: the work is Python under the GIL, so a second would add no speed,
        # only more of it competing with the event loop.
        _PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hasten-parse")
    return await asyncio.get_running_loop().run_in_executor(_PARSER, work)


def _check_depth(body: dict[str, Any], max_depth: int) -> None:
    """Raises naming the top-level field whose value nests deeper than ``max_depth``."""
    num_levels_left = max_depth - 2  # below a field's value, itself at level 2
    for name, value in body.items():
        if type(value) is not dict and type(value) is not list:
            continue
        if num_levels_left < 0 or _is_too_deep(value, num_levels_left):
            raise InvalidRequest(
                f"'{name}' is nested more than {max_depth} levels deep.",
                param=name,
                code="json_too_deep",
            )


def _is_too_deep(node: dict[str, Any] | list[Any], num_levels_left: int) -> bool:
    # Recursion stops after max_depth levels (at most MAX_JSON_DEPTH_LIMIT), far below
    # Python's own limit, however deep the input.
    for child in node.values() if type(node) is dict else node:
        if (type(child) is dict or type(child) is list) and (
            num_levels_left == 0 or _is_too_deep(child, num_levels_left - 1)
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    path: str
    check: Callable[[dict[str, Any]], None]
    is_streamable: bool
    # The body's list of messages (prompts, inputs): bounded by [server] max_messages.
    items_param: str | None = None


CHAT = Endpoint("chat", "/chat/completions", check_chat, True, "messages")
COMPLETIONS = Endpoint("completions", "/completions", check_completion, True, "prompt")
EMBEDDINGS = Endpoint("embeddings", "/embeddings", check_embedding, False, "input")

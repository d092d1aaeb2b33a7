"""Reading a request body: one JSON object, nested only so deep, every key once, its integers
exact, its lists bounded, a large one read off the event loop. What each API requires of
the object is its own (``hasten.apis``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from hasten.config.tables import DEFAULT_MAX_JSON_DEPTH
from hasten.errors import InvalidJSON, InvalidRequest
from hasten.wire import exactjson

_T = TypeVar("_T")

_MAX_COUNTED_BYTES = 8192
# A body this large is parsed and checked on a worker thread: parsing 10 MB of tiny messages
# took the event loop ~0.5 s, and every other client waited for it.
OFF_LOOP_BYTES = 256 * 1024


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


def check_num_items(body: dict[str, Any], param: str | None, max_items: int) -> None:
    """Refuses more messages (prompts, inputs) than ``max_items`` in the API's list."""
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

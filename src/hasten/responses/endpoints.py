"""``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel``, in OpenAI's shapes, on the caller's tenant's records.

Any caller that may ``POST /v1/responses`` may read and delete its tenant's responses; an
id of another tenant, expired or deleted, is OpenAI's 404. Background mode is not run by
hasten, so there is nothing to cancel: ``/cancel`` is the 400 a ``background: true``
request gets.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

import orjson

from hasten.apis import ids
from hasten.apis.known import background_unsupported
from hasten.errors import InvalidRequest, MethodNotAllowed, NotFound
from hasten.proxy.ports import Callers
from hasten.responses.record import not_found
from hasten.responses.state import ResponseState
from hasten.wire.asgi import Scope, Send, header, send_json

PREFIXES = ("/v1/responses/", "/responses/")
_PATH = re.compile(r"(?:/v1)?/responses/([^/]{1,256})(/input_items|/cancel)?")
DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def is_response_path(path: str) -> bool:
    return path.startswith(PREFIXES)


async def handle(state: ResponseState, callers: Callers, scope: Scope, send: Send) -> None:
    path: str = scope["path"]
    method: str = scope["method"]
    matched = _PATH.fullmatch(path)
    if matched is None:
        raise NotFound(f"Unknown path {path}", code="unknown_url")
    response_id, tail = matched.group(1), matched.group(2)
    allowed = {None: "GET, DELETE", "/input_items": "GET", "/cancel": "POST"}[tail]
    if method not in allowed.split(", "):
        raise MethodNotAllowed(f"{method} is not allowed on {path}; use {allowed}", allow=allowed)
    caller = await callers.resolve_model_caller(header(scope, b"authorization"))
    tenant = caller.tenant
    assert tenant is not None
    if tail == "/cancel":
        raise background_unsupported()
    if method == "DELETE":
        if not await state.store.delete(tenant, response_id):
            raise not_found(response_id)
        body = {"id": response_id, "object": "response", "deleted": True}
        await send_json(send, 200, orjson.dumps(body))
        return
    if tail is None:
        record = await state.store.get(tenant, response_id)
        if record is None:
            raise not_found(response_id)
        await send_json(send, 200, orjson.dumps(record.response))
        return
    query = _query(scope)
    if await state.store.get(tenant, response_id) is None:
        raise not_found(response_id)
    items = [
        _listed(item, response_id, index)
        for index, item in enumerate(await state.input_history(tenant, response_id))
    ]
    await send_json(send, 200, orjson.dumps(page(items, **query)))


def _query(scope: Scope) -> dict[str, Any]:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    limit = DEFAULT_LIMIT
    if "limit" in raw:
        text = raw["limit"][-1]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise InvalidRequest(
                f"Invalid 'limit': expected an integer from 1 to {MAX_LIMIT}, got {text[:32]!r}.",
                param="limit",
                code="invalid_value",
            )
        limit = int(text)
    order = raw.get("order", ["desc"])[-1]
    if order not in ("asc", "desc"):
        raise InvalidRequest(
            f"Invalid 'order': expected 'asc' or 'desc', got {order[:32]!r}.",
            param="order",
            code="invalid_value",
        )
    after = raw.get("after", [None])[-1]
    return {"limit": limit, "order": order, "after": after}


def page(
    items: list[dict[str, Any]], *, limit: int, order: str, after: str | None
) -> dict[str, Any]:
    """OpenAI's list: ``limit`` items in ``order`` after the one with id ``after``."""
    ordered = items if order == "asc" else items[::-1]
    if after is not None:
        position = next((i for i, item in enumerate(ordered) if item.get("id") == after), None)
        if position is None:
            raise InvalidRequest(
                f"Invalid 'after': no input item with id '{after[:64]}'.",
                param="after",
                code="invalid_value",
            )
        ordered = ordered[position + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }


def _listed(item: Any, response_id: str, index: int) -> dict[str, Any]:
    """An input item as OpenAI lists it: with an id, a message's text as content parts."""
    if not isinstance(item, dict):
        item = {"type": "message", "role": "user", "content": str(item)}
    listed = dict(item)
    kind = listed.get("type") or ("message" if "role" in listed else None)
    if kind == "message":
        listed["type"] = "message"
        content = listed.get("content")
        if isinstance(content, str):
            part = "output_text" if listed.get("role") == "assistant" else "input_text"
            listed["content"] = [{"type": part, "text": content}]
        listed.setdefault("status", "completed")
    if not isinstance(listed.get("id"), str):
        prefix = "msg" if kind == "message" else "item"
        listed["id"] = ids.item_id(prefix, "in_" + response_id, index)
    return listed

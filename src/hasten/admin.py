"""``/admin/cache/*``: invalidate, warm from JSONL, report a wrong semantic hit, stats.

Every call acts inside the caller's own cache namespace (its tenant), so one tenant can
never evict or read another's answers; ``all_tenants`` is accepted only when the gateway
enforces no keys (one operator, one namespace of namespaces).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from hasten.asgi import JSON_CONTENT_TYPE, Receive, Scope, Send, header, read_body, send_response
from hasten.cache import CachedAnswer, cache_key
from hasten.errors import InvalidRequest, MethodNotAllowed, NotFound
from hasten.gateway import Gateway
from hasten.validation import parse_body

MAX_ADMIN_BODY_BYTES = 64 * 1024 * 1024
PATHS = frozenset(
    {"/admin/cache/invalidate", "/admin/cache/import", "/admin/cache/report", "/admin/cache/stats"}
)


async def handle(gateway: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    path: str = scope["path"]
    tenant = gateway.auth.tenant_for(header(scope, b"authorization"))
    namespace = "*" if gateway.config.cache.is_shared_across_tenants else tenant
    if path == "/admin/cache/stats":
        await _json(send, _stats(gateway))
        return
    if scope["method"] != "POST":
        raise MethodNotAllowed(f"{scope['method']} is not allowed on {path}; use POST")
    if gateway.cache is None:
        raise NotFound("the cache is disabled", code="cache_disabled")
    raw = await read_body(receive, scope, MAX_ADMIN_BODY_BYTES)
    if path == "/admin/cache/import":
        await _json(send, await _import(gateway, raw, namespace))
        return
    body = _object(raw, gateway.config.server.max_json_depth)
    if path == "/admin/cache/invalidate":
        await _json(send, await _invalidate(gateway, body, namespace))
    else:
        await _json(send, await _report(gateway, body, namespace))


def _object(raw: bytes, max_depth: int) -> dict[str, Any]:
    return parse_body(raw or b"{}", max_depth)  # an empty body means no filters


def _typed(body: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise InvalidRequest(f"'{name}' has the wrong type", param=name, code="invalid_type")
    return value


async def _invalidate(gateway: Gateway, body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Deletes an exact key, and semantic entries by id, model, age (within the tenant)."""
    assert gateway.cache is not None
    key = _typed(body, "key", str)
    entry_id = _typed(body, "entry_id", int)
    model = _typed(body, "model", str)
    older_than_s = _typed(body, "older_than_s", (int, float))
    tenant: str | None = namespace
    if body.get("all_tenants") is True:
        if gateway.auth.is_enforcing:
            raise InvalidRequest(
                "all_tenants needs a gateway without tenant keys", param="all_tenants"
            )
        tenant = None
    result: dict[str, Any] = {"exact_deleted": 0, "semantic_deleted": 0}
    if key is not None:
        # A key is a hash that already includes its tenant: it cannot name another's entry
        # unless the caller knows that tenant's full request, which is what it would hit.
        await gateway.cache.delete(key)
        result["exact_deleted"] = 1
    has_semantic_filter = (entry_id, model, older_than_s) != (None, None, None)
    # A bare key names one exact answer; anything else (or nothing) names semantic entries.
    if gateway.semantic is not None and (key is None or has_semantic_filter):
        result["semantic_deleted"] = await gateway.semantic.semantic.invalidate(
            entry_id=entry_id, tenant=tenant, model=model, older_than_s=older_than_s
        )
    return result


async def _report(gateway: Gateway, body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A client says a semantic hit was wrong: evict the entry and tell the error budget."""
    if gateway.semantic is None:
        raise NotFound("the semantic cache is disabled", code="semantic_disabled")
    entry_id = _typed(body, "entry_id", int)
    if entry_id is None:
        raise InvalidRequest(
            "'entry_id' is required (from x-hasten-semantic-entry)",
            param="entry_id",
            code="missing_required_parameter",
        )
    similarity = _typed(body, "similarity", (int, float))
    removed = await gateway.semantic.report_wrong(entry_id, float(similarity or 1.0), namespace)
    return {"evicted": removed}


async def _import(gateway: Gateway, raw: bytes, namespace: str) -> dict[str, Any]:
    """Warms the cache from JSONL: ``{"question", "answer", "model"}`` per line, optionally
    ``"system"`` and ``"params"`` (sampling fields the matching requests will carry)."""
    assert gateway.cache is not None
    num_imported = 0
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        item = _object(line, gateway.config.server.max_json_depth)
        body, answer = _chat_body(item, number), item.get("answer")
        if not isinstance(answer, str):
            raise InvalidRequest(f"line {number}: 'answer' must be a string", param="answer")
        model = gateway.router.resolve(body["model"])
        key = cache_key(body, endpoint="chat", model=model.name, tenant=namespace)
        entry = CachedAnswer.from_body(
            _completion(model.name, answer), endpoint="chat", ttl_s=model.cache.ttl_s
        )
        gateway.cache.put(key, entry)
        if gateway.semantic is not None:
            gateway.semantic.remember(
                body, model=model.name, tenant=namespace, key=key, ttl_s=model.cache.ttl_s
            )
        num_imported += 1
    if gateway.semantic is not None:
        await gateway.semantic.drain()
    return {"imported": num_imported}


def _chat_body(item: dict[str, Any], number: int) -> dict[str, Any]:
    question, model = item.get("question"), item.get("model")
    if not isinstance(question, str) or not isinstance(model, str):
        raise InvalidRequest(
            f"line {number}: 'question' and 'model' must be strings", param="question"
        )
    params = item.get("params") or {"temperature": 0}
    if not isinstance(params, dict):
        raise InvalidRequest(f"line {number}: 'params' must be an object", param="params")
    messages = [{"role": "user", "content": question}]
    system = item.get("system")
    if isinstance(system, str):
        messages.insert(0, {"role": "system", "content": system})
    return {**params, "model": model, "messages": messages}


def _completion(model: str, answer: str) -> bytes:
    return orjson.dumps(
        {
            "id": f"chatcmpl-import-{time.time_ns():x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def _stats(gateway: Gateway) -> dict[str, Any]:
    report: dict[str, Any] = {"exact": gateway.cache.stats() if gateway.cache else None}
    report["semantic"] = gateway.semantic.semantic.stats() if gateway.semantic else None
    return report


async def _json(send: Send, payload: dict[str, Any]) -> None:
    await send_response(send, 200, orjson.dumps(payload), [JSON_CONTENT_TYPE])

"""``/admin/*``: invalidate, warm from JSONL, report a wrong semantic hit, stats, routing.

Who may call what:
- the admin key (``[server] admin_api_key_env``) may call everything, on any tenant;
- with gateway keys, a tenant key may invalidate, report and read stats, always inside its
  own cache namespace, so one tenant can never evict or read another's answers;
- importing answers (which later requests are served) and the global views (routing,
  every tenant's stats) need the admin key;
- without an admin key and without gateway keys nobody is allowed: the admin API is off.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from hasten.auth import ADMIN_KEY_HINT, PUBLIC_TENANT
from hasten.cache import CachedAnswer, cache_key, namespaced_key
from hasten.errors import (
    AdminDisabled,
    Forbidden,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    Unauthorized,
)
from hasten.gateway import Gateway
from hasten.proxy.validation import parse_body
from hasten.values.caller import ADMIN, Caller
from hasten.wire.asgi import Receive, Scope, Send, header, read_body, send_json

MAX_ADMIN_BODY_BYTES = 64 * 1024 * 1024
TENANT_PATHS = frozenset({"/admin/cache/invalidate", "/admin/cache/report", "/admin/cache/stats"})
PATHS = TENANT_PATHS | {"/admin/cache/import", "/admin/routing"}
_GET_PATHS = frozenset({"/admin/cache/stats", "/admin/routing"})


async def handle(gateway: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    path: str = scope["path"]
    caller = await authorize(gateway, scope, path)
    if path in _GET_PATHS:
        if scope["method"] not in ("GET", "HEAD"):
            raise MethodNotAllowed(
                f"{scope['method']} is not allowed on {path}; use GET", allow="GET, HEAD"
            )
        if path == "/admin/cache/stats":
            await _json(send, await _stats(gateway, caller))
        else:
            await _json(send, _routing(gateway))
        return
    if scope["method"] != "POST":
        raise MethodNotAllowed(
            f"{scope['method']} is not allowed on {path}; use POST", allow="POST"
        )
    if gateway.cache is None:
        raise NotFound("the cache is disabled", code="cache_disabled")
    raw = await read_body(receive, scope, MAX_ADMIN_BODY_BYTES)
    if path == "/admin/cache/import":
        await _json(send, await _import(gateway, raw))
        return
    body = _object(raw, gateway.config.server.max_json_depth)
    if path == "/admin/cache/invalidate":
        await _json(send, await _invalidate(gateway, body, caller))
    else:
        await _json(send, await _report(gateway, body, caller))


async def authorize(gateway: Gateway, scope: Scope, path: str) -> Caller:
    """The caller, if its key may use ``path``; a 401 (no valid key) or 403 otherwise."""
    auth = gateway.auth
    if not auth.has_admin_key and not auth.is_enforcing:
        raise AdminDisabled(f"The admin API is off. To enable it, {ADMIN_KEY_HINT}.")
    caller = await auth.resolve(header(scope, b"authorization"))  # 401 for a bad key
    if caller.is_admin or (auth.is_enforcing and path in TENANT_PATHS):
        return caller
    if not auth.is_enforcing:
        raise Unauthorized(f"{path} needs the admin key: send 'Authorization: Bearer <admin key>'")
    if not auth.has_admin_key:
        raise AdminDisabled(
            f"{path} needs the admin key, and none is configured. To enable it, {ADMIN_KEY_HINT}."
        )
    raise Forbidden(f"{path} needs the admin key; a tenant key cannot use it")


def _namespace(gateway: Gateway, caller: Caller, body: dict[str, Any], where: str) -> str | None:
    """The namespace a call acts in: a tenant's own; for the admin key, the one it names
    with ``tenant`` (or every one with ``all_tenants``, returned as None)."""
    tenant = _typed(body, "tenant", str)
    is_all = body.get("all_tenants") is True
    if not caller.is_admin:
        if is_all or tenant not in (None, caller.tenant):
            param = "all_tenants" if is_all else "tenant"
            raise Forbidden(f"'{param}' needs the admin key: a tenant key acts on its own entries")
        tenant = caller.tenant
    elif is_all:
        return None
    elif tenant is None:
        if gateway.auth.is_enforcing:
            raise InvalidRequest(
                f"{where}'tenant' (or 'all_tenants') is required with the admin key when "
                "gateway keys are configured",
                param="tenant",
                code="missing_required_parameter",
            )
        tenant = PUBLIC_TENANT  # the namespace of callers who send no key
    return "*" if gateway.config.cache.is_shared_across_tenants else tenant


def _object(raw: bytes, max_depth: int) -> dict[str, Any]:
    return parse_body(raw or b"{}", max_depth)  # an empty body means no filters


def _typed(body: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise InvalidRequest(f"'{name}' has the wrong type", param=name, code="invalid_type")
    return value


async def _invalidate(gateway: Gateway, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """Deletes an exact key, and semantic entries by id, model, age (within the tenant)."""
    assert gateway.cache is not None
    key = _typed(body, "key", str)
    entry_id = _typed(body, "entry_id", int)
    model = _typed(body, "model", str)
    older_than_s = _typed(body, "older_than_s", (int, float))
    namespace = _namespace(gateway, caller, body, "")
    result: dict[str, Any] = {"exact_deleted": 0, "semantic_deleted": 0}
    if key is not None:
        if namespace is None:
            raise InvalidRequest(
                "'key' names one tenant's entry: give 'tenant', not 'all_tenants'", param="key"
            )
        # The caller's request key (x-hasten-cache-key), placed in its namespace here: no
        # key a client sends can reach another tenant's entry.
        was_held = await gateway.cache.delete(namespaced_key(key, namespace))
        result["exact_deleted"] = int(was_held)  # 0: nothing was stored under that key
    has_semantic_filter = (entry_id, model, older_than_s) != (None, None, None)
    # A bare key names one exact answer; anything else (or nothing) names semantic entries.
    if gateway.semantic is not None and (key is None or has_semantic_filter):
        result["semantic_deleted"] = await gateway.semantic.cache.invalidate(
            entry_id=entry_id, tenant=namespace, model=model, older_than_s=older_than_s
        )
    return result


async def _report(gateway: Gateway, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """A client says a semantic hit was wrong: evict the entry."""
    if gateway.semantic is None:
        raise NotFound("the semantic cache is disabled", code="semantic_disabled")
    entry_id = _typed(body, "entry_id", int)
    if entry_id is None:
        raise InvalidRequest(
            "'entry_id' is required (from x-hasten-semantic-entry)",
            param="entry_id",
            code="missing_required_parameter",
        )
    _typed(body, "similarity", (int, float))  # still checked: clients send it (unused since
    # error-budget mode, whose thresholds it taught, went in issue 40)
    # The admin key may name any entry (ids are global); a tenant only its own.
    namespace = None if caller.is_admin else _namespace(gateway, caller, body, "")
    removed = await gateway.semantic.report_wrong(entry_id, namespace)
    return {"evicted": removed}


async def _import(gateway: Gateway, raw: bytes) -> dict[str, Any]:
    """Warms the cache from JSONL: ``{"question", "answer", "model"}`` per line, optionally
    ``"system"``, ``"params"`` (sampling fields the matching requests will carry) and
    ``"tenant"`` (whose requests it answers; without gateway keys, keyless callers')."""
    assert gateway.cache is not None
    from hasten.semantic.store import NewEntry  # numpy and the store: only with the tier on

    num_imported = 0
    to_index: list[NewEntry] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        item = _object(line, gateway.config.server.max_json_depth)
        if item.get("all_tenants") is True:
            raise InvalidRequest(f"line {number}: name one 'tenant'", param="all_tenants")
        namespace = _namespace(gateway, ADMIN, item, f"line {number}: ")
        assert namespace is not None
        body, answer = _chat_body(item, number), item.get("answer")
        if not isinstance(answer, str):
            raise InvalidRequest(f"line {number}: 'answer' must be a string", param="answer")
        model = gateway.router.resolve(body["model"])
        key = cache_key(body, endpoint="chat", model=model.name, tenant=namespace)
        entry = CachedAnswer.from_body(
            _completion(model.name, answer), endpoint="chat", ttl_s=model.cache.ttl_s
        )
        gateway.cache.put(key, entry)
        to_index.append(NewEntry(body, model.name, namespace, key, model.cache.ttl_s))
        num_imported += 1
    if gateway.semantic is None:
        return {"imported": num_imported}
    # Awaited, in batches: each line its own background task dropped lines past the tier's
    # MAX_BACKGROUND_TASKS.
    await gateway.semantic.cache.insert_many(to_index)
    # Rows a repeat finds by text at once, whose vectors are still being filled in (poll
    # /admin/cache/stats: semantic.vectors_pending) before paraphrases can find them.
    return {"imported": num_imported, "vectors_pending": gateway.semantic.cache.num_vectors_pending}


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


async def _stats(gateway: Gateway, caller: Caller) -> dict[str, Any]:
    """Global tiers for the admin key; a tenant key sees its own requests and entries."""
    if caller.is_admin:
        return gateway.pipeline.cache_stats()
    semantic = gateway.semantic.cache if gateway.semantic else None
    assert caller.tenant is not None
    namespace = "*" if gateway.config.cache.is_shared_across_tenants else caller.tenant
    entries = await semantic.count_entries(tenant=namespace) if semantic else None
    return {
        "tenant": caller.tenant,
        "requests": gateway.stats.of_tenant(caller.tenant),
        "semantic": None if entries is None else {"entries": entries},
    }


async def _json(send: Send, payload: dict[str, Any]) -> None:
    await send_json(send, 200, orjson.dumps(payload))


def _routing(gateway: Gateway) -> dict[str, object]:
    state: dict[str, object] = {
        "models": gateway.client.routing_state(),
        "upstreams": gateway.client.upstreams_state(),
    }
    if gateway.fleet_routing is not None:
        state["fleet"] = gateway.fleet_routing.snapshot()
    return state

"""``/admin/keys``: create, list, read, change, rotate and revoke virtual keys (admin key).

    POST   /admin/keys               create: 201 with the secret, shown this once
    GET    /admin/keys               list (no secrets, ever)
    GET    /admin/keys/{id}          one key
    PATCH  /admin/keys/{id}          change its name, models or limits
    POST   /admin/keys/{id}/rotate   a new secret (shown once); the old one stops working
    DELETE /admin/keys/{id}          revoke (the record stays, marked revoked)

Each change is a compare and swap on the stored record (a concurrent change answers 409)
and is forgotten by this replica's lookup cache at once; other replicas see it within
``[keys] cache_ttl_s``. Secrets are never logged: log lines name the key's id.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qs

import orjson

from hasten.admin.cache import authorize
from hasten.errors import Conflict, DamagedKeyRecord, HastenError, MethodNotAllowed, NotFound
from hasten.gateway import Gateway
from hasten.keys.directory import KeyDirectory
from hasten.keys.payloads import KEY_ID, KeyFields, creation, patch, shown, with_secret
from hasten.keys.record import KeyRecord, new_record, new_secret
from hasten.proxy.validation import parse_body
from hasten.wire.asgi import Receive, Scope, Send, read_body, send_json

_log = logging.getLogger("hasten.keys")

PREFIX = "/admin/keys"
MAX_BODY_BYTES = 64 * 1024  # a key's fields; far below the other admin bodies
# A response carrying a secret must not be kept by any cache between us and the admin.
_NO_STORE = ((b"cache-control", b"no-store"),)


def is_key_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


async def handle(gateway: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    path: str = scope["path"]
    await authorize(gateway, scope, path)  # 401/403 unless the admin key
    directory = gateway.keys
    if directory is None:
        raise NotFound(
            "virtual keys are off: set [keys] enabled = true", code="virtual_keys_disabled"
        )
    method: str = scope["method"]
    parts = path[len(PREFIX) :].strip("/").split("/") if path != PREFIX else []
    if not parts:
        _allow(method, ("GET", "POST"), path)
        if method == "POST":
            await _create(directory, await _body(gateway, scope, receive), send)
        else:
            await _list(directory, _tenant_filter(scope), send)
        return
    if len(parts) > 2 or (len(parts) == 2 and parts[1] != "rotate"):
        raise NotFound(f"Unknown path {path[:200]}", code="unknown_url")
    is_rotate = len(parts) == 2
    _allow(method, ("POST",) if is_rotate else ("GET", "PATCH", "DELETE"), path)
    changes = await _body(gateway, scope, receive) if method == "PATCH" else None
    fields = None if changes is None else patch(changes)  # a bad body: 400 before any 404
    record = await _existing(directory, parts[0])
    if is_rotate:
        await _rotate(directory, record, send)
    elif fields is not None:
        assert changes is not None
        await _patch(directory, record, fields, sorted(changes), send)
    elif method == "DELETE":
        await _revoke(directory, record, send)
    else:
        await _json(send, 200, shown(record))


async def _create(directory: KeyDirectory, body: dict[str, Any], send: Send) -> None:
    fields = creation(body)
    assert fields.tenant is not None and fields.name is not None and fields.limits is not None
    record, secret = new_record(
        fields.tenant, fields.name, fields.models, fields.limits, time.time()
    )
    if not await directory.store.add(record, max_keys=directory.max_keys):
        raise Conflict(
            f"the key store holds its maximum of {directory.max_keys} keys ([keys] max_keys)",
            code="max_keys_reached",
        )
    directory.forget(record.secret_sha256)  # were it cached as unknown: it is a key now
    _log.info("virtual key %s created for tenant %s", record.key_id, record.tenant)
    await _json(send, 201, with_secret(record, secret), _NO_STORE)


async def _list(directory: KeyDirectory, tenant: str | None, send: Send) -> None:
    records = await directory.store.list_all()
    if tenant is not None:
        records = [record for record in records if record.tenant == tenant]
    await _json(send, 200, _listing(directory, records))


async def _rotate(directory: KeyDirectory, record: KeyRecord, send: Send) -> None:
    _check_active(record)
    secret = new_secret()
    rotated = record.rotated(secret)
    await _replace(directory, record, rotated)
    _log.info("virtual key %s rotated", record.key_id)
    await _json(send, 200, with_secret(rotated, secret), _NO_STORE)


async def _revoke(directory: KeyDirectory, record: KeyRecord, send: Send) -> None:
    if not record.is_revoked:  # revoking twice is no error: the key is revoked
        record_before, record = record, record.revoked()
        await _replace(directory, record_before, record)
        _log.info("virtual key %s revoked", record.key_id)
    await _json(send, 200, shown(record))


async def _patch(
    directory: KeyDirectory, record: KeyRecord, fields: KeyFields, names: list[str], send: Send
) -> None:
    _check_active(record)
    changed = record.changed(
        name=record.name if fields.name is None else fields.name,
        models=fields.models if fields.has_models else record.models,
        limits=record.limits if fields.limits is None else fields.limits,
    )
    await _replace(directory, record, changed)
    _log.info("virtual key %s changed (%s)", record.key_id, ", ".join(names))
    await _json(send, 200, shown(changed))


async def _replace(directory: KeyDirectory, old: KeyRecord, new: KeyRecord) -> None:
    if not await directory.store.replace(old, new):
        raise Conflict(f"key {old.key_id} changed meanwhile; read it again and retry")
    directory.forget(old.secret_sha256)


async def _existing(directory: KeyDirectory, key_id: str) -> KeyRecord:
    unknown = NotFound(f"no virtual key {key_id[:40]!r}", param="id", code="key_not_found")
    if KEY_ID.fullmatch(key_id) is None:
        raise unknown
    try:
        record = await directory.store.get(key_id)
    except DamagedKeyRecord as exc:
        _log.warning("virtual key %s: stored record refused: %s", key_id, exc)
        raise HastenError(
            f"the stored record of {key_id} is damaged (it fails its checksum) and is not "
            "used; create a new key",
            code="key_record_damaged",
        ) from None
    if record is None:
        raise unknown
    return record


def _check_active(record: KeyRecord) -> None:
    if record.is_revoked:
        raise Conflict(f"key {record.key_id} is revoked", code="key_revoked")


def _listing(directory: KeyDirectory, records: list[KeyRecord]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [shown(record) for record in records],
        "store": directory.store.kind,
        "max_keys": directory.max_keys,
        # This replica's lookup cache: how often the request path had to ask the store.
        "cache": {
            "known": directory.cache.num_known,
            "unknown": directory.cache.num_unknown,
            "store_lookups": directory.num_lookups,
            "damaged_refused": directory.num_damaged,
        },
    }


def _tenant_filter(scope: Scope) -> str | None:
    """``?tenant=<name>``: only that tenant's keys."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("tenant")
    return values[-1] if values else None


async def _body(gateway: Gateway, scope: Scope, receive: Receive) -> dict[str, Any]:
    raw = await read_body(receive, scope, MAX_BODY_BYTES)
    return parse_body(raw or b"{}", gateway.config.server.max_json_depth)


def _allow(method: str, methods: tuple[str, ...], path: str) -> None:
    allowed = (*methods, "HEAD") if "GET" in methods else methods
    if method not in allowed:
        raise MethodNotAllowed(
            f"{method} is not allowed on {path[:200]}; use {' or '.join(methods)}",
            allow=", ".join(allowed),
        )


async def _json(
    send: Send, status: int, payload: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    await send_json(send, status, orjson.dumps(payload), headers)

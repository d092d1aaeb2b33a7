"""The Responses API's state as the request path asks for it (``hasten.proxy.ports``).

``open`` is called once per model request, before its body is parsed:

- for a request naming a ``previous_response_id``, the stored chain (each response's input
  items, then its output, oldest first; its ``instructions`` are not carried over, as at
  OpenAI) is written into ``input`` and the id dropped, so everything after (validation,
  the cache key, coalescing, translation for a chat-only upstream, failover) sees the whole
  conversation. An id the tenant does not hold is a 404 before anything goes upstream.
  What the id was, the client's own input and the deployment that holds the id upstream
  (``PreviousResponse``) go with the request: the attempt to that deployment, speaking
  Responses, carries the id instead of the history (``hasten.upstream.bridge``);
- the answer's ``send`` is wrapped (``Keeper``) so that a complete answer's record is
  written before the answer's end reaches the client: a follow-up sent the moment the
  client has the answer finds it. The Response objects it passes name the request's own
  ``previous_response_id`` (the upstream that got the expanded history, or the cache entry
  of the same conversation, may say otherwise).

Any other API gets its body back unchanged and a send left alone (``NOT_KEPT``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from hasten.apis import responses
from hasten.apis.known import RESPONSES
from hasten.errors import HastenError, InvalidRequest, PayloadTooLarge
from hasten.proxy.ports import NOT_KEPT, KeptAnswer
from hasten.proxy.validation import off_loop, parse_body
from hasten.responses.record import StoredResponse, input_items, not_found
from hasten.responses.store import ResponseStore
from hasten.values.previous import PreviousResponse
from hasten.wire import exactjson
from hasten.wire.asgi import Message, Send

_log = logging.getLogger("hasten.responses")

_PREVIOUS = b'"previous_response_id"'
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_TERMINAL_MARKS = (b'"response.completed"', b'"response.incomplete"')
_ITEM_DONE_MARK = b'"response.output_item.done"'
_SSE = b"text/event-stream"
_UPSTREAM_HEADER = b"x-hasten-upstream"
# A Response object's echo of the request's previous_response_id, as any JSON writer puts
# it (a string value cannot hold these bytes: its quotes would be escaped).
_ECHO = re.compile(rb'"previous_response_id"\s*:\s*(null|"(?:[^"\\]|\\.)*")')
_ECHO_NAMED = re.compile(rb'"previous_response_id"\s*:\s*"')


class ResponseState:
    """Stored responses for the gateway: expands chains, keeps answers, serves the
    ``/v1/responses/{id}`` endpoints (``hasten.responses.endpoints``)."""

    def __init__(
        self,
        store: ResponseStore,
        *,
        ttl_s: float,
        max_record_bytes: int,
        max_history_bytes: int,
        max_chain_depth: int,
        max_json_depth: int,
        holders: frozenset[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        # The deployments that speak Responses natively: an answer from one of them carries
        # the upstream's own id, which it holds; None: any deployment named (tests).
        self.holders = holders
        self.ttl_s = ttl_s
        self.max_record_bytes = max_record_bytes
        self.max_history_bytes = max_history_bytes
        self.max_chain_depth = max_chain_depth
        self.max_json_depth = max_json_depth
        self._clock = clock
        self.num_kept = 0
        self.num_not_kept = 0  # complete answers past the size bound, or a failed write

    async def open(self, api: str, tenant: str, raw: bytes) -> tuple[bytes, KeptAnswer]:
        if api != RESPONSES:
            return raw, NOT_KEPT
        sent = raw
        previous = None
        if _PREVIOUS in raw:
            raw, previous = await self._expand(tenant, raw)
        return raw, Keeper(self, tenant, sent, previous)

    # --- reading --------------------------------------------------------------------------

    async def chain(self, tenant: str, response_id: str) -> list[StoredResponse]:
        """``response_id``'s record and those it continues, newest first; raises the 404
        naming ``previous_response_id`` when the tenant does not hold one of them, a 400
        past the depth bound and a 413 past the bytes bound."""
        return (await self._walk(tenant, response_id))[0]

    async def _walk(self, tenant: str, response_id: str) -> tuple[list[StoredResponse], int]:
        """``chain``, and the bytes of its items as JSON."""
        chain: list[StoredResponse] = []
        size = 0
        current: str | None = response_id
        while current is not None:
            if len(chain) >= self.max_chain_depth:
                raise InvalidRequest(
                    f"The conversation ending with response '{response_id}' is more than "
                    f"{self.max_chain_depth} responses long; send its history as input.",
                    param="previous_response_id",
                    code="conversation_too_long",
                )
            record = await self.store.get(tenant, current)
            if record is None:
                if current == response_id:
                    raise not_found(response_id, "previous_response_id")
                raise not_found(current, "previous_response_id")  # an expired ancestor
            size += len(orjson.dumps(record.input_items)) + len(orjson.dumps(record.output_items))
            if size > self.max_history_bytes:
                raise PayloadTooLarge(
                    f"The conversation ending with response '{response_id}' is more than "
                    f"{self.max_history_bytes} bytes; send a shorter history as input.",
                    param="previous_response_id",
                )
            chain.append(record)
            current = record.previous_response_id
        return chain, size

    async def input_history(self, tenant: str, response_id: str) -> list[Any]:
        """The input the model was given for ``response_id``: its chain's history, then
        its own input items (``GET /v1/responses/{id}/input_items``)."""
        chain = await self.chain(tenant, response_id)
        items: list[Any] = []
        for record in reversed(chain[1:]):
            items.extend(record.input_items)
            items.extend(record.output_items)
        items.extend(chain[0].input_items)
        return items

    async def _expand(self, tenant: str, raw: bytes) -> tuple[bytes, PreviousResponse | None]:
        body = parse_body(raw, self.max_json_depth)  # the 400 the client would get anyway
        previous = body.get("previous_response_id")
        own = body.get("input")
        if not isinstance(previous, str) or not previous:
            return raw, None  # null, or not a string: the request's check says so
        if own is not None and not isinstance(own, str | list):
            return raw, None
        chain, num_bytes = await self._walk(tenant, previous)
        # A long conversation is joined and written out on the parser thread, as a large
        # request body is parsed there: the event loop keeps serving other clients.
        out = await off_loop(num_bytes, lambda: self._expanded(chain, body, previous, own))
        return out, PreviousResponse(previous, own, "input" in body, chain[0].upstream)

    def _expanded(
        self, chain: list[StoredResponse], body: dict[str, Any], previous: str, own: Any
    ) -> bytes:
        """``body`` with ``chain``'s conversation (newest first) before its own input."""
        history: list[Any] = []
        for record in reversed(chain):
            history.extend(record.input_items)
            history.extend(record.output_items)
        expanded = {k: v for k, v in body.items() if k != "previous_response_id"}
        expanded["input"] = history + input_items(own)
        out = exactjson.dumps(expanded)
        if len(out) > self.max_history_bytes:
            raise PayloadTooLarge(
                f"The request with the conversation of '{previous}' is {len(out)} bytes, "
                f"more than {self.max_history_bytes}; send a shorter history as input.",
                param="previous_response_id",
            )
        return out

    # --- writing --------------------------------------------------------------------------

    async def keep(
        self, tenant: str, request: bytes, response: dict[str, Any], upstream: str | None
    ) -> None:
        """Stores ``response`` as the answer to ``request`` (the body the client sent),
        unless it says ``store: false``. Never raises: the answer goes out regardless."""
        try:
            body = orjson.loads(request)
        except orjson.JSONDecodeError:
            body = exactjson.loads(request)
        if not isinstance(body, dict) or body.get("store") is False:
            return
        response_id = response.get("id")
        if not isinstance(response_id, str) or not response_id:
            return
        previous = body.get("previous_response_id")
        now = self._clock()
        model = response.get("model")
        record = StoredResponse(
            tenant=tenant,
            response_id=response_id,
            model=model if isinstance(model, str) else str(body.get("model", "")),
            input_items=input_items(body.get("input")),
            previous_response_id=previous if isinstance(previous, str) and previous else None,
            response=response,
            created_s=now,
            expires_s=now + self.ttl_s,
            upstream=upstream,
        )
        if await self.store.put(record):
            self.num_kept += 1
        else:
            self.num_not_kept += 1

    async def aclose(self) -> None:
        await self.store.aclose()


class Keeper:
    """Watches one Responses answer on its way to the client and, when its end passes (the
    JSON body, or a stream's ``response.completed`` / ``response.incomplete`` event),
    stores it and only then lets the end go on. What it holds meanwhile is bounded: a
    JSON body up to the record bound, a stream's current event (and the output items
    done so far, for an upstream whose final event leaves the output out). A failed or
    partial answer, or one past the bound, is passed on and not stored.

    Each Response object it passes names the request's own ``previous_response_id``: the
    upstream that got the expanded history says null, and a cache entry of the same
    conversation says whatever its first request did. Where they agree (a pass-through to
    the upstream holding the id, a request without one) the bytes go on untouched."""

    __slots__ = (
        "_body",
        "_echo",
        "_head",
        "_is_sse",
        "_is_storing",
        "_is_watching",
        "_items",
        "_pending",
        "_request",
        "_size",
        "_state",
        "_tenant",
        "_upstream",
        "previous",
    )

    def __init__(
        self,
        state: ResponseState,
        tenant: str,
        request: bytes,
        previous: PreviousResponse | None = None,
    ) -> None:
        self._state = state
        self._tenant = tenant
        self._request = request
        self.previous = previous
        self._echo = b"null" if previous is None else orjson.dumps(previous.response_id)
        self._is_storing = True
        self._is_watching = False
        self._is_sse = False
        self._upstream: str | None = None
        self._body: list[bytes] = []  # a JSON answer, held until its end
        self._head: Message | None = None  # and its head: the echo can change its length
        self._pending = bytearray()  # a stream's current, unfinished event
        self._items: list[Any] = []
        self._size = 0

    def wrap(self, send: Send, body: Mapping[str, Any]) -> Send:
        self._is_storing = body.get("store") is not False
        if not self._is_storing and self.previous is None:
            return send  # nothing of it is kept or changed: its answer goes by unread

        async def kept_send(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                self._start(message)
                if self._is_watching and not self._is_sse:
                    self._head = message
                else:
                    await send(message)
            elif kind != "http.response.body" or not self._is_watching:
                await send(message)
            elif self._is_sse:
                await self._stream(send, message)
            else:
                await self._json(send, message)

        return kept_send

    def _echoed(self, data: bytes) -> bytes:
        """``data`` (a whole event or body) with every Response object's
        ``previous_response_id`` the request's."""
        if _PREVIOUS not in data or (self.previous is None and not _ECHO_NAMED.search(data)):
            return data
        echo = self._echo
        head = b'"previous_response_id":'
        return _ECHO.sub(lambda m: m[0] if m[1] == echo else head + echo, data)

    def _start(self, message: Message) -> None:
        self._is_watching = message.get("status") == 200
        for name, value in message.get("headers", ()):
            lower = name.lower()
            if lower == b"content-type":
                self._is_sse = value.lower().startswith(_SSE)
            elif lower == _UPSTREAM_HEADER:
                self._upstream = value.decode("latin-1").split(",")[-1].strip() or None

    async def _json(self, send: Send, message: Message) -> None:
        chunk: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        self._body.append(chunk)
        self._size += len(chunk)
        if self._size > self._state.max_record_bytes:
            await self._give_up(send, message, b"".join(self._body), more)
            return
        if more:
            return
        body = self._echoed(b"".join(self._body))
        self._body = []
        response = _response_of(body) if self._is_storing else None
        if response is not None:
            await self._keep(response)
        await self._send_head(send, len(body))
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _send_head(self, send: Send, num_bytes: int | None) -> None:
        """The held head, its length ``num_bytes`` (None: as it was)."""
        head, self._head = self._head, None
        if head is None:
            return
        if num_bytes is not None:
            headers = [
                (name, str(num_bytes).encode() if name.lower() == b"content-length" else value)
                for name, value in head.get("headers", ())
            ]
            head = {**head, "headers": headers}
        await send(head)

    async def _stream(self, send: Send, message: Message) -> None:
        chunk: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        pending = self._pending
        searched = max(0, len(pending) - 3)  # an end split across chunks is found too
        pending += chunk
        out = bytearray()
        start = 0
        for found in _EVENT_END.finditer(pending, searched):
            end = found.end()
            event = self._echoed(bytes(pending[start:end]))
            start = end
            # A store:false follow-up is watched for its echo only.
            if self._is_storing and any(mark in event for mark in _TERMINAL_MARKS):
                response = self._terminal(event)
                if response is not None:
                    if out:
                        await send(
                            {"type": "http.response.body", "body": bytes(out), "more_body": True}
                        )
                        out = bytearray()
                    await self._keep(response)
            elif self._is_storing and _ITEM_DONE_MARK in event:
                self._item(event)
            out += event
        del pending[:start]
        if len(pending) > self._state.max_record_bytes:
            self._is_watching = False  # an event past any record's size: not stored
        if not more or not self._is_watching:
            out += pending  # the rest goes on as it comes
            pending.clear()
        await send({"type": "http.response.body", "body": bytes(out), "more_body": more})

    async def _give_up(self, send: Send, message: Message, held: bytes, more: bool) -> None:
        self._is_watching = False
        self._body = []
        self._state.num_not_kept += 1
        await self._send_head(send, None)
        await send({**message, "body": held, "more_body": more})

    def _terminal(self, event: bytes) -> dict[str, Any] | None:
        parsed = _event_data(event)
        if parsed is None or parsed.get("type") not in responses.COMPLETE_EVENTS:
            return None
        response = parsed.get("response")
        if not isinstance(response, dict):
            return None
        if not response.get("output") and self._items:
            response = {**response, "output": self._items}
        return response

    def _item(self, event: bytes) -> None:
        parsed = _event_data(event)
        if parsed is None or parsed.get("type") != responses.ITEM_DONE:
            return
        item = parsed.get("item")
        index = parsed.get("output_index")
        self._size += len(event)
        if isinstance(item, dict) and isinstance(index, int) and index == len(self._items):
            self._items.append(item)
        if self._size > self._state.max_record_bytes:
            self._items = []  # the final event's output is all a record may hold then

    async def _keep(self, response: dict[str, Any]) -> None:
        self._is_watching = False  # one answer, one record
        upstream = self._upstream
        holders = self._state.holders
        if holders is not None and upstream not in holders:
            upstream = None  # a translated answer: its id is hasten's own, held nowhere else
        try:
            await self._state.keep(self._tenant, self._request, response, upstream)
        except (HastenError, ValueError, TypeError, OSError) as exc:
            # A record that cannot be written costs its follow-ups, never the answer.
            self._state.num_not_kept += 1
            _log.warning("a response was not stored: %s: %s", type(exc).__name__, exc)


def _event_data(event: bytes) -> dict[str, Any] | None:
    lines = [line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    try:
        parsed = orjson.loads(b"\n".join(lines))
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _response_of(body: bytes) -> dict[str, Any] | None:
    """A whole JSON answer's Response object, if it is a complete one."""
    try:
        return responses.parse_body(body)
    except (ValueError, TypeError):
        return None

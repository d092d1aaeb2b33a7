"""One attempt's leg to one upstream, in the API that upstream speaks.

A client request arrives in one API (chat, completions, embeddings, responses, messages);
each deployment speaks some of them (``UpstreamConfig.speaks``). Where it speaks the
client's, the request goes as the client sent it and the answer comes back byte for byte.
Where it does not, the request is translated to chat (the pivot: every API meets there) or,
for an upstream that speaks Messages alone, on to Messages, and the answer is translated
back while it streams, so everything above the attempt (the first-token watch, the guard,
the recorder, the cache, the client) sees the client's own API. The choice is per
attempt: a Responses request whose primary speaks Responses may fail over to a chat-only
deployment, translated only there.

A Responses follow-up arrives with its stored conversation expanded into it (so the cache
key and every translated attempt see it whole); the deployment that answered its previous
response natively holds that id, and its attempt carries the id and the client's own input
instead (``held``), with the expanded body as the leg's ``fallback`` for an upstream that
no longer knows the id (``hasten.upstream.attempt`` resends it once).

``choose_wire`` decides (pure); ``Bridging.leg`` builds the request and the
``TranslatedResponse`` that carries the answer back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import orjson

from hasten.apis import ids, messages, messages_chat, responses, responses_chat
from hasten.apis.cache_control import with_breakpoints
from hasten.apis.chat import CHAT
from hasten.apis.known import MESSAGES, RESPONSES
from hasten.config import UpstreamConfig
from hasten.errors import HastenError, InvalidRequest, UpstreamError
from hasten.upstream.integrity import malformed
from hasten.upstream.transport import UpstreamResponse
from hasten.wire import exactjson
from hasten.wire.sse import DONE, SSEDecoder

ANTHROPIC_VERSION = "2023-06-01"
_PATHS = {
    CHAT: "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    RESPONSES: "/responses",
    MESSAGES: "/messages",
}
_SSE_TYPE = "text/event-stream; charset=utf-8"
_JSON_TYPE = "application/json"
# Events in, events out, per stream: one chat chunk is a few Responses events.
Events = list[dict[str, Any]]


def choose_wire(client: str, speaks: tuple[str, ...]) -> str | None:
    """The API to speak to an upstream that speaks ``speaks`` for a ``client`` request;
    None when there is no way (a Messages request to a Responses-only upstream)."""
    if client in speaks:
        return client
    if client in (RESPONSES, MESSAGES):
        if CHAT in speaks:
            return CHAT
        if MESSAGES in speaks:
            return MESSAGES  # a Responses request, through chat
        return None
    if client == CHAT and MESSAGES in speaks:
        return MESSAGES
    return None


def wire_request(client: str, wire: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` (a ``client`` request) as a ``wire`` request; ``InvalidRequest`` naming the
    field that has no translation."""
    chat: Mapping[str, Any] = body
    if client == RESPONSES:
        chat = responses_chat.responses_request_to_chat(body)
    elif client == MESSAGES:
        chat = messages_chat.messages_request_to_chat(body)
    if wire == CHAT:
        return dict(chat)
    if wire == MESSAGES:
        return messages_chat.chat_request_to_messages(chat)
    raise InvalidRequest(f"a {client} request cannot be sent as {wire}")


class Leg:
    """What one attempt sends, and how its answer comes back. ``fallback``: the body to
    send instead when the upstream does not know the previous response ``body`` names."""

    __slots__ = ("answer", "body", "fallback", "headers", "path")

    def __init__(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        answer: Callable[[UpstreamResponse], UpstreamResponse] | None = None,
        fallback: bytes | None = None,
    ) -> None:
        self.path, self.body, self.headers, self.answer = path, body, headers, answer
        self.fallback = fallback


class Bridging(Protocol):
    """The proxy's request, ready to go to any upstream (``hasten.proxy``)."""

    def leg(self, upstream: UpstreamConfig) -> Leg:
        """The leg to ``upstream``; raises ``HastenError`` when it cannot take it."""


class NativeOnly:
    """A request that goes to every upstream as it is (a GET, a probe, completions)."""

    __slots__ = ("_body", "_headers", "_path")

    def __init__(self, path: str, body: bytes, headers: Mapping[str, str]) -> None:
        self._path, self._body, self._headers = path, body, headers

    def leg(self, upstream: UpstreamConfig) -> Leg:
        return Leg(self._path, self._body, _auth(upstream, self._headers, None))


class ClientRequest:
    """A client's request in its API, sent natively or translated per upstream.

    ``native`` is the body for an upstream that speaks the client's API (the client's own
    bytes where nothing changed them); ``parsed`` the request as the gateway read it (after
    its parameter policy), translated for the others with ``model`` as the upstream's name
    and asked as a stream when ``is_stream``. ``held``: the deployment holding the previous
    response a follow-up names, and its body naming it (for it alone, speaking natively).
    """

    __slots__ = (
        "_client",
        "_headers",
        "_held",
        "_is_stream",
        "_model",
        "_native",
        "_parsed",
        "_wires",
    )

    def __init__(
        self,
        client: str,
        native: bytes,
        parsed: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        model: str,
        is_stream: bool,
        held: tuple[str, bytes] | None = None,
    ) -> None:
        self._client, self._native, self._parsed = client, native, parsed
        self._headers, self._model, self._is_stream = headers, model, is_stream
        self._held = held
        self._wires: dict[str, bytes] = {}  # a translated body, built once per wire API

    def leg(self, upstream: UpstreamConfig) -> Leg:
        client = self._client
        if not upstream.has_tools and _asks_for_tools(self._parsed):
            raise InvalidRequest(
                f"upstream {upstream.name!r} cannot call tools (its model's chat template "
                f"has none), and this request has tools; send it to a model that can, or "
                f"without tools",
                param="tools",
                code="tools_unsupported",
            )
        wire = choose_wire(client, upstream.speaks)
        if wire is None:
            raise InvalidRequest(
                f"upstream {upstream.name!r} speaks {', '.join(upstream.speaks)}: a "
                f"{client} request cannot be translated to any of them",
                code="unsupported_api",
            )
        headers = _auth(upstream, self._headers, wire)
        is_marked = wire == MESSAGES and upstream.is_auto_cache_control
        if wire == client and not is_marked:
            held = self._held
            if held is not None and held[0] == upstream.name:
                return Leg(_PATHS[wire], held[1], headers, fallback=self._native)
            return Leg(_PATHS[wire], self._native, headers)
        if wire == client:
            return Leg(_PATHS[wire], self._marked_native(), headers)
        body = self._wires.get(wire)
        if body is None or is_marked:
            request = wire_request(client, wire, self._parsed)
            request["model"] = self._model
            if self._is_stream:
                request["stream"] = True
                if wire == CHAT and upstream.has_stream_options:
                    request["stream_options"] = {"include_usage": True}
            else:
                request.pop("stream", None)
            if is_marked:
                request = with_breakpoints(request) or request
            body = exactjson.dumps(request)
            if not is_marked:
                self._wires[wire] = body
        translate = _answers(client, wire, self._parsed, self._is_stream)
        return Leg(_PATHS[wire], body, headers, translate)

    def _marked_native(self) -> bytes:
        """The client's own Messages body, with cache breakpoints where it set none."""
        parsed = exactjson.loads(self._native)
        marked = with_breakpoints(parsed) if isinstance(parsed, dict) else None
        return self._native if marked is None else exactjson.dumps(marked)


def _auth(
    upstream: UpstreamConfig, headers: Mapping[str, str], wire: str | None
) -> Mapping[str, str]:
    """The request's headers for ``upstream`` in the header its API reads the key from:
    ``x-api-key`` (with ``anthropic-version``) for Messages, ``authorization`` for the
    others; the upstream's own key when it has one, else the forwarded client's."""
    if wire == MESSAGES:
        out = {k: v for k, v in headers.items() if k != "authorization"}
        authorization = headers.get("authorization", "")
        if upstream.api_key:
            out["x-api-key"] = upstream.api_key
        elif "x-api-key" not in out and authorization.lower().startswith("bearer "):
            out["x-api-key"] = authorization[7:]
        out.setdefault("anthropic-version", ANTHROPIC_VERSION)
        return out
    out = {k: v for k, v in headers.items() if not k.startswith("anthropic-") and k != "x-api-key"}
    if upstream.api_key:
        out["authorization"] = f"Bearer {upstream.api_key}"
    elif "x-api-key" in headers and "authorization" not in headers:
        out["authorization"] = f"Bearer {headers['x-api-key']}"
    return out


def _answers(
    client: str, wire: str, request: Mapping[str, Any], is_stream: bool
) -> Callable[[UpstreamResponse], UpstreamResponse]:
    def wrap(response: UpstreamResponse) -> UpstreamResponse:
        return TranslatedResponse(response, client, wire, request, is_stream)

    return wrap


class _Chain:
    """Upstream events to client events, through chat where both ends differ from it."""

    __slots__ = ("_client", "_created", "_into", "_out_of", "_request")

    def __init__(self, client: str, wire: str, request: Mapping[str, Any]) -> None:
        self._client, self._request = client, request
        self._created = int(time.time())
        model = str(request.get("model") or "")
        # wire -> chat
        self._out_of = (
            messages_chat.MessagesToChatStream(created=self._created) if wire == MESSAGES else None
        )
        # chat -> client
        self._into: Any
        if client == RESPONSES:
            self._into = responses_chat.ChatToResponsesStream(request, created_at=self._created)
        elif client == MESSAGES:
            self._into = messages_chat.ChatToMessagesStream(model=model)
        else:
            self._into = None

    def start(self) -> Events:
        return self._into.start() if self._into is not None else []

    def feed(self, event: dict[str, Any]) -> Events:
        chunks = [event] if self._out_of is None else self._out_of.feed(event)
        if self._into is None:
            return chunks
        out: Events = []
        for chunk in chunks:
            if chunk.get("error") is not None:
                raise ValueError("an error event")
            out += self._into.feed(chunk)
        return out

    def finish(self) -> Events:
        return self._into.finish() if self._into is not None else []

    def fail(self, message: str, code: str) -> Events:
        if self._into is not None:
            return list(self._into.fail(message, code))
        return [messages_chat.chat_error_event(message, code)]


class TranslatedResponse:
    """An upstream answer in another API, read as the client's: a stream translated event
    by event as it arrives, a whole body or an error body at once."""

    __slots__ = ("_client", "_is_stream", "_request", "_response", "_wire", "headers", "status")

    def __init__(
        self,
        response: UpstreamResponse,
        client: str,
        wire: str,
        request: Mapping[str, Any],
        is_stream: bool,
    ) -> None:
        self._response, self._client, self._wire = response, client, wire
        self._request, self._is_stream = request, is_stream
        self.status = response.status
        is_events = is_stream and response.status == 200
        headers = {
            k.lower(): v for k, v in response.headers.items() if k.lower() != "content-length"
        }
        headers["content-type"] = _SSE_TYPE if is_events else _JSON_TYPE
        self.headers: Mapping[str, str] = headers

    def close(self) -> None:
        self._response.close()

    async def read(self, timeout_s: float) -> bytes:
        body = await self._response.read(timeout_s)
        return self._body(body)

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        if not (self._is_stream and self.status == 200):
            body = b"".join([chunk async for chunk in self._response.iter_chunks(idle_timeout_s)])
            yield self._body(body)
            return
        frame = (
            responses.frame
            if self._client == RESPONSES
            else (messages.frame if self._client == MESSAGES else _chat_frame)
        )
        chain = _Chain(self._client, self._wire, self._request)
        decoder = SSEDecoder()
        opening = chain.start()
        if opening:
            yield b"".join(frame(event) for event in opening)
        is_ended = False
        async for chunk in self._response.iter_chunks(idle_timeout_s):
            out: list[bytes] = []
            for payload in decoder.feed(chunk):
                if is_ended:
                    continue  # nothing after the end is of this answer
                if payload == DONE:
                    out += [frame(event) for event in chain.finish()]
                    is_ended = True
                    if self._client == CHAT:
                        out.append(b"data: [DONE]\n\n")
                    continue
                try:
                    event = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    raise malformed(f"an event that is not JSON: {payload[:40]!r}") from None
                if not isinstance(event, dict):
                    raise malformed("an event that is not a JSON object")
                error = _event_error(self._wire, event)
                if error is not None:
                    out += [frame(e) for e in chain.fail(error.message, error.code or "")]
                    is_ended = True
                    continue
                try:
                    events = chain.feed(event)
                except ValueError as exc:
                    raise malformed(f"an event without the {self._wire} shape: {exc}") from None
                out += [frame(e) for e in events]
                if self._wire == MESSAGES and event.get("type") == messages.MESSAGE_STOP:
                    out += [frame(e) for e in chain.finish()]
                    is_ended = True
                    if self._client == CHAT:
                        out.append(b"data: [DONE]\n\n")
            if out:
                yield b"".join(out)
        if decoder.has_pending:
            raise malformed("a stream that ends halfway through an event")

    def _body(self, body: bytes) -> bytes:
        """A whole answer or an error body in the client's API; an upstream body that is no
        answer of its own API is passed on for the integrity check to refuse."""
        try:
            if self.status != 200:
                return _error_body(self._client, self._wire, self.status, body)
            return _whole_body(self._client, self._wire, self._request, body)
        except (ValueError, KeyError, TypeError, AttributeError):
            return body


def _chat_frame(event: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _event_error(wire: str, event: Mapping[str, Any]) -> HastenError | None:
    if wire == MESSAGES:
        return messages.event_error(event)
    error = event.get("error")
    if error is None:
        return None
    message = error.get("message") if isinstance(error, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return UpstreamError(
        f"upstream error mid-stream: {message or error}",
        code=code if isinstance(code, str) and code else "upstream_stream_error",
    )


def _whole_body(client: str, wire: str, request: Mapping[str, Any], body: bytes) -> bytes:
    parsed = orjson.loads(body)
    now = int(time.time())
    chat = parsed if wire == CHAT else messages_chat.messages_body_to_chat(parsed, created=now)
    if client == RESPONSES:
        answer = responses_chat.chat_body_to_responses(
            chat, request, response_id=ids.new_response_id(), created_at=now
        )
    elif client == MESSAGES:
        answer = messages_chat.chat_body_to_messages(
            chat, message_id=ids.new_message_id(), model=request.get("model")
        )
    else:
        answer = chat
    return orjson.dumps(answer)


def _error_body(client: str, wire: str, status: int, body: bytes) -> bytes:
    chat = body if wire == CHAT else messages_chat.messages_error_to_chat(status, body)
    if client == RESPONSES:
        return responses_chat.chat_error_to_responses(status, chat)
    if client == MESSAGES:
        return messages_chat.chat_error_to_messages(status, chat)
    return chat


def _asks_for_tools(parsed: Mapping[str, Any]) -> bool:
    """Tools offered and not switched off (``tool_choice: "none"`` in Chat Completions and
    Responses, ``{"type": "none"}`` in Messages)."""
    tools = parsed.get("tools")
    if not isinstance(tools, list) or not tools:
        return False
    choice = parsed.get("tool_choice")
    return not (choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none"))

"""Every client API hasten speaks, as ``hasten.apis.api.Api``, found by name.

Chat Completions, Completions and Embeddings are their own modules' (``chat``,
``embeddings``); the OpenAI Responses and Anthropic Messages APIs are built here from
their wire modules (``responses``, ``messages``) and their translation to chat
(``responses_chat``, ``messages_chat``), which the semantic tier, hybrid routing and
prefix affinity read a request through.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from hasten.apis import messages, messages_chat, responses, responses_chat
from hasten.apis.api import Api, ParamFields
from hasten.apis.chat import CHAT_API, COMPLETIONS_API
from hasten.apis.embeddings import EMBEDDINGS_API
from hasten.errors import HastenError, InvalidRequest, UpstreamError

RESPONSES = "responses"
MESSAGES = "messages"

# Responses fields that change how or where an answer is delivered, kept, or billed, never
# what it says (per-run values among them: a session's metadata, a cache routing key).
_RESPONSES_UNKEYED = frozenset(
    {
        "stream",
        "stream_options",
        "store",
        "background",
        "metadata",
        "client_metadata",  # Codex: its session, thread, turn and installation ids
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
    }
)
# Messages fields of the same kind: Claude Code puts its session id in metadata.user_id.
_MESSAGES_UNKEYED = frozenset({"stream", "metadata", "service_tier"})
_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d{1,12})')
_RESPONSE_ID = re.compile(rb'"id":\s*"(resp_[A-Za-z0-9_-]{1,200})"')


def _parsed(payload: bytes) -> dict[str, Any]:
    event = orjson.loads(payload)
    if not isinstance(event, dict):
        raise ValueError("an event that is not a JSON object")
    return event


def _without_item_ids(value: Any) -> Any:
    """Input items without their ``id``: a client mints one per run (Codex: ``msg_<uuid>``)
    and it names the item, not what it says."""
    if not isinstance(value, list):
        return value
    return [
        {k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) else item
        for item in value
    ]


def background_unsupported() -> InvalidRequest:
    """The 400 for background mode (``background: true``, ``/cancel``): hasten answers every
    request while its client waits, and keeps no queue of responses to poll or cancel."""
    return InvalidRequest(
        "Background mode is not supported by hasten: send the request without "
        "'background' (stream it to see its progress).",
        param="background",
        code="unsupported_parameter",
    )


class ResponsesEnding:
    """A Responses stream ended properly: ``response.completed`` (or ``.incomplete``: a
    whole answer to its request) came last, and no event was an error, a failure or not a
    JSON object. A ``[DONE]`` some servers add after the end changes nothing."""

    __slots__ = ("_is_complete", "is_broken")

    def __init__(self) -> None:
        self._is_complete = False
        self.is_broken = False

    def event(self, parsed: Any) -> None:
        if not isinstance(parsed, dict) or self._is_complete:
            self.is_broken = True  # not JSON, or anything after the end
            return
        kind = parsed.get("type")
        if kind in (responses.FAILED, responses.ERROR):
            self.is_broken = True
        elif kind in responses.COMPLETE_EVENTS:
            self._is_complete = True

    def done(self) -> None:
        return None

    @property
    def is_ended(self) -> bool:
        return self._is_complete and not self.is_broken

    @property
    def is_finished(self) -> bool:
        return self._is_complete

    def is_whole(self, has_pending: bool) -> bool:
        return not has_pending and not self.is_broken and self._is_complete


class MessagesEnding:
    """A Messages stream ended properly: ``message_stop`` came last, after the
    ``message_delta`` that gives the stop reason, and no event was an ``error``."""

    __slots__ = ("_has_stop_reason", "_is_stopped", "is_broken")

    def __init__(self) -> None:
        self._has_stop_reason = False
        self._is_stopped = False
        self.is_broken = False

    def event(self, parsed: Any) -> None:
        if not isinstance(parsed, dict) or self._is_stopped:
            self.is_broken = True
            return
        kind = parsed.get("type")
        if kind == messages.ERROR:
            self.is_broken = True
        elif kind == messages.MESSAGE_DELTA:
            delta = parsed.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._has_stop_reason = True
        elif kind == messages.MESSAGE_STOP:
            self._is_stopped = True

    def done(self) -> None:
        return None

    @property
    def is_ended(self) -> bool:
        return self._is_stopped and not self.is_broken

    @property
    def is_finished(self) -> bool:
        return self._is_stopped and self._has_stop_reason

    def is_whole(self, has_pending: bool) -> bool:
        return not has_pending and not self.is_broken and self.is_finished


class _EventApi:
    """What the two typed-event APIs share: ``event:`` lines, no ``[DONE]``, usage in every
    stream, a whole answer merged from its events and split back into them."""

    __slots__ = ()

    is_streamable = True
    is_generating = True
    has_done = False

    def is_stream(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def wants_usage(self, body: Mapping[str, Any]) -> bool:
        return True  # always in the stream: nothing to add or strip

    def can_add_usage(self) -> bool:
        return False

    def as_stream(self, body: dict[str, Any], *, with_usage: bool) -> dict[str, Any]:
        body["stream"] = True
        return body


class ResponsesApi(_EventApi):
    """The OpenAI Responses API (``hasten.apis.responses``)."""

    __slots__ = ()

    name = RESPONSES
    path = "/responses"
    items_param = "input"
    param_fields = ParamFields(("max_output_tokens",))

    def check(self, body: dict[str, Any]) -> None:
        responses.check_request(body)
        if body.get("background") is True:
            raise background_unsupported()

    def key_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in body.items() if k not in _RESPONSES_UNKEYED}
        if "input" in view:
            view["input"] = _without_item_ids(view["input"])
        return view

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return responses.max_output_tokens(body)

    def chat_view(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            return responses_chat.responses_request_to_chat(body)
        except (InvalidRequest, ValueError):
            return None  # no chat form (a built-in tool, a previous response to expand)

    def affinity_view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        # The instructions, then the input items as sent (their ids repeat with the
        # history they are in).
        items: list[Any] = []
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            items.append({"role": "system", "content": instructions})
        value = body.get("input")
        if isinstance(value, str):
            items.append({"role": "user", "content": value})
        elif isinstance(value, list):
            items += value
        return {
            "tools": body.get("tools"),
            "messages": items,
            "max_output_tokens": body.get("max_output_tokens"),
        }

    def is_output(self, event: Any) -> bool:
        return isinstance(event, dict) and responses.is_output_event(event)

    def event_error(self, event: Any) -> UpstreamError | None:
        return responses.event_error(event) if isinstance(event, dict) else None

    def ending(self) -> ResponsesEnding:
        return ResponsesEnding()

    def merge(self) -> responses.StreamMerge:
        return responses.StreamMerge()

    def split(self, body: bytes) -> list[bytes]:
        return [orjson.dumps(event) for event in responses.body_to_events(body)]

    def frames(self, payloads: Sequence[bytes], *, include_usage: bool) -> list[bytes]:
        return [responses.frame(payload) for payload in payloads]

    def stream(self, payloads: Sequence[bytes], *, include_usage: bool) -> bytes:
        return b"".join(self.frames(payloads, include_usage=include_usage))

    def fresh_payloads(self, payloads: Sequence[bytes]) -> Sequence[bytes]:
        refresher = responses.Refresher(int(time.time()))
        return [orjson.dumps(e) for e in refresher.events(_parsed(p) for p in payloads)]

    def fresh_body(self, body: bytes) -> bytes:
        return responses.Refresher(int(time.time())).body(body)

    def failure_event(self, error: HastenError, sent: bytes = b"") -> bytes:
        """``response.failed``, numbered after the last event ``sent`` and naming its
        response, so the client's parser reads it as the end of the same response."""
        numbers = _SEQUENCE.findall(sent[-4096:])
        found = _RESPONSE_ID.search(sent)
        event = responses.failed_event(
            error.message,
            error.code or responses.STREAM_ERROR_CODE,
            response_id=None if found is None else found.group(1).decode(),
            sequence_number=int(numbers[-1]) + 1 if numbers else 0,
        )
        return responses.frame(event)

    def render_error(self, error: HastenError) -> bytes:
        return error.to_json()  # OpenAI's shape, as for chat


class MessagesApi(_EventApi):
    """The Anthropic Messages API (``hasten.apis.messages``)."""

    __slots__ = ()

    name = MESSAGES
    path = "/messages"
    items_param = "messages"
    param_fields = ParamFields(("max_tokens",), "stop_sequences")

    def check(self, body: dict[str, Any]) -> None:
        messages.check_request(body)

    def key_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in body.items() if k not in _MESSAGES_UNKEYED}
        for name in ("system", "tools"):
            if name in view:
                view[name] = messages.without_breakpoints(view[name])
        if "messages" in view:
            view["messages"] = messages.messages_without_breakpoints(view["messages"])
        return view

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return messages.max_output_tokens(body)

    def chat_view(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            return messages_chat.messages_request_to_chat(body)
        except (InvalidRequest, ValueError):
            return None

    def affinity_view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        # The system prompt, then the messages, cache breakpoints and all: a client moves
        # its breakpoint along with the conversation (Claude Code marks the latest turns),
        # past the head a key covers once the conversation is long enough to keep one.
        items: list[Any] = []
        system = body.get("system")
        if system is not None:
            items.append({"role": "system", "content": system})
        value = body.get("messages")
        if isinstance(value, list):
            items += value
        return {
            "tools": body.get("tools"),
            "messages": items,
            "max_tokens": body.get("max_tokens"),
        }

    def is_output(self, event: Any) -> bool:
        return isinstance(event, dict) and messages.is_output_event(event)

    def event_error(self, event: Any) -> UpstreamError | None:
        return messages.event_error(event) if isinstance(event, dict) else None

    def ending(self) -> MessagesEnding:
        return MessagesEnding()

    def merge(self) -> messages.StreamMerge:
        return messages.StreamMerge()

    def split(self, body: bytes) -> list[bytes]:
        return [orjson.dumps(event) for event in messages.body_to_events(body)]

    def frames(self, payloads: Sequence[bytes], *, include_usage: bool) -> list[bytes]:
        return [messages.frame(payload) for payload in payloads]

    def stream(self, payloads: Sequence[bytes], *, include_usage: bool) -> bytes:
        return b"".join(self.frames(payloads, include_usage=include_usage))

    def fresh_payloads(self, payloads: Sequence[bytes]) -> Sequence[bytes]:
        refresher = messages.Refresher()
        return [orjson.dumps(e) for e in refresher.events(_parsed(p) for p in payloads)]

    def fresh_body(self, body: bytes) -> bytes:
        return messages.Refresher().body(body)

    def failure_event(self, error: HastenError, sent: bytes = b"") -> bytes:
        kind = messages.error_type(error.status_code)
        return messages.frame(messages.error_event(error.message, kind))

    def render_error(self, error: HastenError) -> bytes:
        return messages.error_body(error.status_code, error.message)


RESPONSES_API = ResponsesApi()
MESSAGES_API = MessagesApi()

APIS: dict[str, Api] = {
    api.name: api
    for api in (CHAT_API, COMPLETIONS_API, EMBEDDINGS_API, RESPONSES_API, MESSAGES_API)
}


def api_named(name: str) -> Api:
    """The API a stored answer names (``CachedAnswer.endpoint``); KeyError for none."""
    return APIS[name]

"""The Anthropic Messages API on the wire: requests, stream events, whole messages, errors.

As the anthropic Python SDK (``anthropic.types``) parses them:

- A request (``POST /v1/messages``) is checked by ``check_request``: clear 400s naming
  the parameter the way Anthropic does (``messages.0.content.1.text``), before any
  upstream call; fields it does not know pass (a native upstream gets them).
- A stream is SSE with an ``event:`` line per event: ``message_start`` (the message with
  no content yet), per content block ``content_block_start``, ``content_block_delta``...
  (``text_delta``, ``input_json_delta``, ``thinking_delta``, ``signature_delta``),
  ``content_block_stop``; then ``message_delta`` (``stop_reason`` and cumulative usage) and
  ``message_stop``. ``ping`` may come at any point; an ``error`` event ends a stream that
  broke.
- A non-stream answer is the Message object; errors are
  ``{"type": "error", "error": {"type", "message"}}`` with the type following the status.

``count_tokens`` answers ``POST /v1/messages/count_tokens`` with an estimate (its
docstring says how it is made).
"""

from __future__ import annotations

import base64
import binascii
import copy
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from hasten.apis import fields, ids
from hasten.apis.fields import in_range, int_at_least, is_bool, is_list, is_object, is_str, is_text
from hasten.apis.usage import Usage, from_messages, to_messages
from hasten.errors import InvalidRequest, UpstreamError

MESSAGE_START = "message_start"
BLOCK_START = "content_block_start"
BLOCK_DELTA = "content_block_delta"
BLOCK_STOP = "content_block_stop"
MESSAGE_DELTA = "message_delta"
MESSAGE_STOP = "message_stop"
PING = "ping"
ERROR = "error"
TERMINAL_EVENTS = frozenset({MESSAGE_STOP, ERROR})
STREAM_ERROR_CODE = "upstream_stream_error"

MAX_CACHE_BREAKPOINTS = 4  # Anthropic: at most 4 blocks with cache_control per request
CACHE_TTLS = ("5m", "1h")
MIN_THINKING_BUDGET_TOKENS = 1024
# A system turn mid-conversation is Claude Code's (2.1 sends its agent list as one).
_ROLES = ("user", "assistant", "system")
_TOOL_CHOICES = ("auto", "any", "tool", "none")
_IMAGE_SOURCES = ("base64", "url", "file")
_WHITESPACE = re.compile(r"\s+")

# Error types by status, as Anthropic names them.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# --- requests --------------------------------------------------------------------------


def check_request(body: Mapping[str, Any]) -> None:
    """Raises ``InvalidRequest`` naming the first parameter that is missing or invalid."""
    check_count_request(body)
    fields.require(body, "max_tokens", int_at_least(1), "an integer >= 1", "max_tokens")
    fields.optional(body, "stream", is_bool, "a boolean", "stream")
    stops = fields.optional(
        body, "stop_sequences", is_list, "an array of strings", "stop_sequences"
    )
    if stops is not None and not all(isinstance(stop, str) for stop in stops):
        raise fields.invalid("stop_sequences", "an array of strings", stops)
    fields.optional(body, "temperature", in_range(0, 1), "a number from 0 to 1", "temperature")
    fields.optional(body, "top_p", in_range(0, 1), "a number from 0 to 1", "top_p")
    fields.optional(body, "top_k", int_at_least(0), "an integer >= 0", "top_k")
    metadata = fields.optional(body, "metadata", is_object, "an object", "metadata")
    if metadata is not None:
        fields.optional(metadata, "user_id", is_str, "a string", "metadata.user_id")
    fields.optional(body, "service_tier", is_str, "a string", "service_tier")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking["budget_tokens"]
        if budget >= body["max_tokens"]:
            raise InvalidRequest(
                "thinking.budget_tokens: must be less than max_tokens",
                param="thinking.budget_tokens",
                code="invalid_value",
            )


def check_count_request(body: Mapping[str, Any]) -> None:
    """What ``count_tokens`` needs (``check_request`` without ``max_tokens``)."""
    fields.require(body, "model", is_text, "a non-empty string", "model")
    messages = fields.require(body, "messages", is_list, "an array of messages", "messages")
    if not messages:
        raise InvalidRequest(
            "messages: at least one message is required", param="messages", code="invalid_value"
        )
    # A plain message holds no breakpoint: only the others are counted.
    num_breakpoints = 0
    for index, message in enumerate(messages):
        if not _is_plain_message(message):
            _check_message(message, f"messages.{index}")
            num_breakpoints += _message_breakpoints(message)
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"))
    _check_thinking(body.get("thinking"))
    cache_control = body.get("cache_control")
    if cache_control is not None:
        check_cache_control(cache_control, "cache_control")
    num_breakpoints += _breakpoints_outside_messages(body)
    if num_breakpoints > MAX_CACHE_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {num_breakpoints}.",
            param="cache_control",
            code="invalid_value",
        )


def check_cache_control(value: Any, param: str) -> None:
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise fields.invalid(param, "{'type': 'ephemeral'} with an optional ttl", value)
    fields.optional(value, "ttl", lambda ttl: ttl in CACHE_TTLS, "'5m' or '1h'", f"{param}.ttl")


def _is_plain_message(message: Any) -> bool:
    """Whether ``message`` is of the shapes an agent's history is made of, and sound: text,
    tool calls and their results, unmarked. Such a message needs no other check, and the
    parameter names a 400 would use (``messages.12.content.0.text``) are then never built:
    on a long history that formatting was most of the check's cost. Anything else, or
    anything wrong, goes through ``_check_message``, which names what is wrong."""
    if type(message) is not dict or message.get("role") not in _ROLES:
        return False
    content = message.get("content")
    return type(content) is str or (type(content) is list and all(map(_is_plain_block, content)))


def _is_plain_block(block: Any) -> bool:
    if type(block) is not dict or "cache_control" in block:
        return False
    kind = block.get("type")
    if kind == "text":
        return type(block.get("text")) is str
    if kind == "tool_use":
        return (
            is_text(block.get("id"))
            and is_text(block.get("name"))
            and type(block.get("input")) is dict
        )
    if kind == "tool_result":
        content = block.get("content")
        return (
            is_text(block.get("tool_use_id"))
            and (block.get("is_error") is None or type(block["is_error"]) is bool)
            and (
                content is None
                or type(content) is str
                or (type(content) is list and all(map(_is_plain_block, content)))
            )
        )
    return False


def _check_message(message: Any, param: str) -> None:
    if not isinstance(message, dict):
        raise fields.invalid(param, "an object", message)
    fields.require(
        message,
        "role",
        lambda role: role in _ROLES,
        "'user', 'assistant' or 'system'",
        f"{param}.role",
    )
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise fields.invalid(f"{param}.content", "a string or an array of content blocks", content)
    for index, block in enumerate(content):
        check_block(block, f"{param}.content.{index}")


def check_block(block: Any, param: str) -> None:
    """One content block; block types this does not know pass if they name their ``type``."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise fields.invalid(param, "a content block with a type", block)
    kind = block["type"]
    if kind == "text":
        fields.require(block, "text", is_str, "a string", f"{param}.text")
    elif kind in ("image", "document"):
        source = fields.require(block, "source", is_object, "an object", f"{param}.source")
        fields.require(source, "type", is_text, "a non-empty string", f"{param}.source.type")
        if kind == "image" and source["type"] not in _IMAGE_SOURCES:
            raise fields.invalid(f"{param}.source.type", "base64, url or file", source["type"])
    elif kind == "tool_use":
        fields.require(block, "id", is_text, "a non-empty string", f"{param}.id")
        fields.require(block, "name", is_text, "a non-empty string", f"{param}.name")
        fields.require(block, "input", is_object, "an object", f"{param}.input")
    elif kind == "tool_result":
        fields.require(block, "tool_use_id", is_text, "a non-empty string", f"{param}.tool_use_id")
        fields.optional(block, "is_error", is_bool, "a boolean", f"{param}.is_error")
        content = block.get("content")
        if isinstance(content, list):
            for index, inner in enumerate(content):
                check_block(inner, f"{param}.content.{index}")
        elif content is not None and not isinstance(content, str):
            raise fields.invalid(f"{param}.content", "a string or an array of blocks", content)
    elif kind == "thinking":
        fields.require(block, "thinking", is_str, "a string", f"{param}.thinking")
        fields.require(block, "signature", is_str, "a string", f"{param}.signature")
    elif kind == "redacted_thinking":
        fields.require(block, "data", is_str, "a string", f"{param}.data")
    if block.get("cache_control") is not None:
        check_cache_control(block["cache_control"], f"{param}.cache_control")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise fields.invalid("system", "a string or an array of text blocks", system)
    for index, block in enumerate(system):
        param = f"system.{index}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise fields.invalid(param, "a text block", block)
        check_block(block, param)


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise fields.invalid("tools", "an array of tools", tools)
    for index, tool in enumerate(tools):
        param = f"tools.{index}"
        if not isinstance(tool, dict):
            raise fields.invalid(param, "an object", tool)
        fields.require(tool, "name", is_text, "a non-empty string", f"{param}.name")
        if tool.get("type") in (None, "custom"):
            fields.require(
                tool, "input_schema", is_object, "a JSON schema object", f"{param}.input_schema"
            )
            fields.optional(tool, "description", is_str, "a string", f"{param}.description")
        if tool.get("cache_control") is not None:
            check_cache_control(tool["cache_control"], f"{param}.cache_control")


def _check_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise fields.invalid("tool_choice", "an object", choice)
    kind = fields.require(
        choice,
        "type",
        lambda kind: kind in _TOOL_CHOICES,
        "auto, any, tool or none",
        "tool_choice.type",
    )
    if kind == "tool":
        fields.require(choice, "name", is_text, "a non-empty string", "tool_choice.name")
    fields.optional(
        choice,
        "disable_parallel_tool_use",
        is_bool,
        "a boolean",
        "tool_choice.disable_parallel_tool_use",
    )


def _check_thinking(thinking: Any) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, dict):
        raise fields.invalid("thinking", "an object", thinking)
    kind = fields.require(
        thinking,
        "type",
        lambda kind: kind in ("enabled", "disabled", "adaptive"),
        "enabled, disabled or adaptive",
        "thinking.type",
    )
    if kind == "enabled":
        fields.require(
            thinking,
            "budget_tokens",
            int_at_least(MIN_THINKING_BUDGET_TOKENS),
            f"an integer >= {MIN_THINKING_BUDGET_TOKENS}",
            "thinking.budget_tokens",
        )


def count_cache_breakpoints(body: Mapping[str, Any]) -> int:
    """Blocks marked with ``cache_control`` (tools, system, messages, tool results' inner
    blocks), the top-level automatic marker counted as one."""
    count = _breakpoints_outside_messages(body)
    for message in _objects(body.get("messages")):
        count += _message_breakpoints(message)
    return count


def _breakpoints_outside_messages(body: Mapping[str, Any]) -> int:
    count = 1 if body.get("cache_control") is not None else 0
    for tool in _objects(body.get("tools")):
        count += tool.get("cache_control") is not None
    for block in _objects(body.get("system")):
        count += block.get("cache_control") is not None
    return count


def _message_breakpoints(message: Mapping[str, Any]) -> int:
    count = 0
    for block in _objects(message.get("content")):
        count += block.get("cache_control") is not None
        for inner in _objects(block.get("content")):
            count += inner.get("cache_control") is not None
    return count


def without_breakpoints(blocks: Any) -> Any:
    """``blocks`` (tools, system blocks, or one message's content) without ``cache_control``
    where Anthropic reads it: on each block, and on the blocks inside a tool result. A
    breakpoint tells the provider what to cache, not what to answer; the same key inside a
    tool's input is the input, and stays. Copied only where a marker is dropped: an agent's
    long history, with a marker or two, is otherwise shared, not rebuilt."""
    if not isinstance(blocks, list):
        return blocks
    changed: list[Any] | None = None
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        stripped = block
        if "cache_control" in block:
            stripped = {k: v for k, v in block.items() if k != "cache_control"}
        inner = block.get("content")
        if block.get("type") == "tool_result" and isinstance(inner, list):
            stripped_inner = without_breakpoints(inner)
            if stripped_inner is not inner:
                stripped = {**stripped, "content": stripped_inner}
        if stripped is not block:
            if changed is None:
                changed = list(blocks)
            changed[index] = stripped
    return blocks if changed is None else changed


def messages_without_breakpoints(messages: Any) -> Any:
    """Each message's content without its breakpoints (``without_breakpoints``)."""
    if not isinstance(messages, list):
        return messages
    changed: list[Any] | None = None
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        stripped = without_breakpoints(content)
        if stripped is not content:
            if changed is None:
                changed = list(messages)
            changed[index] = {**message, "content": stripped}
    return messages if changed is None else changed


def _objects(value: Any) -> Iterable[dict[str, Any]]:
    if isinstance(value, list):
        return (item for item in value if isinstance(item, dict))
    return ()


def last_user_text(body: Mapping[str, Any]) -> str | None:
    """The text of the final user turn (the semantic cache's question), whitespace folded;
    None unless the last message is a user turn of text alone (a tool result, an image:
    an answer that depends on more than the words)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                return None
            if not isinstance(block.get("text"), str):
                return None
            parts.append(block["text"])
        text = " ".join(parts)
    else:
        return None
    return _WHITESPACE.sub(" ", text).strip() or None


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_tokens")
    return value if fields.is_int(value) else None


# --- stream events ----------------------------------------------------------------------


def is_output_event(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` shows the model's answer has begun (the first token), or ends the
    stream: any content delta, a block that starts with content of its own (a tool call,
    redacted thinking), the message's end, an error. ``message_start`` and ``ping`` come
    before any token."""
    kind = event.get("type")
    if kind in (BLOCK_DELTA, MESSAGE_DELTA, MESSAGE_STOP, ERROR):
        return True
    if kind == BLOCK_START:
        block = event.get("content_block")
        if not isinstance(block, Mapping):
            return False
        block_type = block.get("type")
        if block_type == "text":
            return bool(block.get("text"))
        if block_type == "thinking":
            return bool(block.get("thinking"))
        return True
    return False


def is_terminal(event: Mapping[str, Any]) -> bool:
    return event.get("type") in TERMINAL_EVENTS


def is_complete(event: Mapping[str, Any]) -> bool:
    """``message_stop``: the message is whole (``StreamMerge`` checks it had its delta)."""
    return event.get("type") == MESSAGE_STOP


def event_error(event: Mapping[str, Any]) -> UpstreamError | None:
    """The failure an ``error`` event reports (its ``error.type`` as the code); else None."""
    if event.get("type") != ERROR:
        return None
    error = event.get("error")
    if not isinstance(error, Mapping):
        error = {}
    message, kind = error.get("message"), error.get("type")
    text = message if isinstance(message, str) and message else "upstream error"
    return UpstreamError(
        f"upstream error mid-stream: {text}",
        code=kind if isinstance(kind, str) and kind else STREAM_ERROR_CODE,
    )


def usage_of(event: Mapping[str, Any], previous: Usage | None = None) -> Usage | None:
    """Token counts after ``event``: ``message_start`` has the input, ``message_delta`` the
    cumulative counts (those it leaves out keep their ``previous`` values); other events
    leave ``previous`` as it was."""
    kind = event.get("type")
    if kind == MESSAGE_START:
        message = event.get("message")
        if isinstance(message, Mapping):
            return from_messages(message.get("usage"), previous)
    elif kind == MESSAGE_DELTA:
        return from_messages(event.get("usage"), previous)
    return previous


def frame(event: Mapping[str, Any] | bytes) -> bytes:
    """One SSE event as Anthropic writes it: ``event: <type>``, ``data: <json>``, a blank line.

    ``event`` is the parsed event or its JSON payload; raises ValueError if it names no type.
    """
    if isinstance(event, bytes | bytearray):
        payload = bytes(event)
        parsed = orjson.loads(payload)
        kind = parsed.get("type") if isinstance(parsed, dict) else None
    else:
        payload = orjson.dumps(event)
        kind = event.get("type")
    if not isinstance(kind, str) or not kind or "\n" in kind or "\r" in kind:
        raise ValueError("a Messages event needs a one-line type")
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    kind = _ERROR_TYPES.get(status)
    if kind is not None:
        return kind
    return "api_error" if status >= 500 else "invalid_request_error"


def error_object(message: str, kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(message: str, kind: str = "api_error") -> dict[str, Any]:
    """The ``error`` event a broken stream ends with (``overloaded_error``, ``api_error``...)."""
    return error_object(message, kind)


def error_body(status: int, message: str) -> bytes:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return orjson.dumps(error_object(message, error_type(status)))


# --- message objects --------------------------------------------------------------------


def new_message(
    *,
    message_id: str,
    model: str,
    content: Sequence[Mapping[str, Any]] = (),
    stop_reason: str | None = None,
    stop_sequence: str | None = None,
    usage: Usage | None = None,
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": to_messages(usage if usage is not None else Usage(0, 0)),
    }


def message_text(message: Mapping[str, Any]) -> str:
    """Every text block of a message, joined."""
    return "".join(
        str(block.get("text", ""))
        for block in message.get("content") or ()
        if isinstance(block, Mapping) and block.get("type") == "text"
    )


# --- merging a stream into a body -------------------------------------------------------


class StreamMerge:
    """Fed a stream's parsed events in order; ``body()`` is the Message a non-stream call
    returns (tool inputs parsed from their JSON deltas, usage merged as the SDK does)."""

    __slots__ = (
        "_blocks",
        "_failed",
        "_has_delta",
        "_json",
        "_message",
        "_stopped",
        "_texts",
        "_usage",
    )

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._texts: dict[tuple[int, str], list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._has_delta = False
        self._stopped = False
        self._failed = False

    def add(self, event: Mapping[str, Any]) -> None:
        """One parsed event; raises ValueError for one without the Messages shape."""
        try:
            self._add(event)
        except (AttributeError, KeyError, TypeError, IndexError) as exc:
            raise ValueError("stream event does not have the Messages shape") from exc

    def _add(self, event: Mapping[str, Any]) -> None:
        kind = event["type"]
        if kind == MESSAGE_START:
            message = event["message"]
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                raise TypeError("message")
            self._message = copy.deepcopy(message)
            usage = message.get("usage")
            self._usage = dict(usage) if isinstance(usage, dict) else {}
        elif kind == BLOCK_START:
            self._require_start()
            block = event["content_block"]
            if not isinstance(block, dict):
                raise TypeError("content_block")
            index = _index(event)
            self._blocks[index] = copy.deepcopy(block)
            for name in ("text", "thinking"):
                self._texts.pop((index, name), None)
        elif kind == BLOCK_DELTA:
            self._delta(_index(event), event["delta"])
        elif kind == BLOCK_STOP:
            self._stop_block(_index(event))
        elif kind == MESSAGE_DELTA:
            self._require_start()
            delta = event["delta"]
            for name in ("stop_reason", "stop_sequence"):
                if name in delta:
                    self._message[name] = delta[name]  # type: ignore[index]
            usage = event.get("usage")
            if isinstance(usage, dict):
                self._usage.update(
                    (name, value) for name, value in usage.items() if value is not None
                )
            self._has_delta = True
        elif kind == MESSAGE_STOP:
            self._stopped = True
        elif kind == ERROR:
            self._failed = True

    def _require_start(self) -> None:
        if self._message is None:
            raise TypeError("an event before message_start")

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self._blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            self._piece(index, block, "text", delta["text"])
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(_text(delta["partial_json"]))
        elif kind == "thinking_delta":
            self._piece(index, block, "thinking", delta["thinking"])
        elif kind == "signature_delta":
            block["signature"] = _text(delta["signature"])
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])

    def _piece(self, index: int, block: dict[str, Any], name: str, piece: Any) -> None:
        """Kept in a list, joined when read: adding to a string per delta copies the whole
        text each time (quadratic in a long answer)."""
        pieces = self._texts.get((index, name))
        if pieces is None:
            pieces = self._texts[(index, name)] = [_text(block[name])]
        pieces.append(_text(piece))

    def _stop_block(self, index: int) -> None:
        block = self._blocks[index]
        parts = self._json.pop(index, None)
        if parts is None:
            return
        raw = "".join(parts)
        if raw:
            value = orjson.loads(raw)
            if not isinstance(value, dict):
                raise TypeError("a tool input that is not an object")
            block["input"] = value

    @property
    def is_whole(self) -> bool:
        return self._message is not None and self._stopped and self._has_delta and not self._failed

    def snapshot(self) -> dict[str, Any] | None:
        """The message as far as the stream has come (None before ``message_start``)."""
        if self._message is None:
            return None
        message = dict(self._message)
        for (index, name), pieces in self._texts.items():
            self._blocks[index][name] = "".join(pieces)
        message["content"] = [copy.deepcopy(self._blocks[i]) for i in sorted(self._blocks)]
        message["usage"] = dict(self._usage)
        return message

    def body(self) -> bytes:
        """The whole message; ValueError if the stream failed or did not reach its
        ``message_delta`` and ``message_stop``, or left a tool's input unparsable."""
        if self._failed:
            raise ValueError("the stream failed")
        if not self.is_whole:
            raise ValueError("the stream ended before its message was complete")
        try:
            for index in list(self._json):
                self._stop_block(index)
        except (TypeError, orjson.JSONDecodeError) as exc:
            raise ValueError("a tool input that is not a JSON object") from exc
        snapshot = self.snapshot()
        assert snapshot is not None
        return orjson.dumps(snapshot)


def _index(event: Mapping[str, Any]) -> int:
    value = event["index"]
    if not fields.is_int(value) or value < 0:
        raise TypeError("index")
    return int(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("delta")
    return value


# --- a stored answer as a stream --------------------------------------------------------


def parse_body(body: bytes | Mapping[str, Any]) -> dict[str, Any]:
    """A whole Message (with its stop reason); ValueError for anything else."""
    message = orjson.loads(body) if isinstance(body, bytes | bytearray) else dict(body)
    if (
        not isinstance(message, dict)
        or message.get("type") != "message"
        or not isinstance(message.get("id"), str)
        or not isinstance(message.get("content"), list)
        or message.get("stop_reason") is None
    ):
        raise ValueError("not a whole Messages API message")
    return message


def body_to_events(body: bytes | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events a stream client gets for a stored message, as Anthropic sends them (each
    block's content in one delta, a ``ping`` after the first block opens). Raises
    ValueError for a body that is not a whole message."""
    message = parse_body(body)
    raw_usage = message.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    # Anthropic's message_start counts the output begun so far: a token, not the total.
    num_output = usage.get("output_tokens")
    start_usage = {**usage, "output_tokens": 1 if fields.is_int(num_output) and num_output else 0}
    opening = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    opening["usage"] = start_usage
    events: list[dict[str, Any]] = [{"type": MESSAGE_START, "message": opening}]
    blocks = message["content"]
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ValueError("a content block that is not an object")
        events.append({"type": BLOCK_START, "index": index, "content_block": opened_block(block)})
        if index == 0:
            events.append({"type": PING})
        events.extend(
            {"type": BLOCK_DELTA, "index": index, "delta": delta} for delta in block_deltas(block)
        )
        events.append({"type": BLOCK_STOP, "index": index})
    if not blocks:
        events.append({"type": PING})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message.get("stop_sequence")}
    events.append({"type": MESSAGE_DELTA, "delta": delta, "usage": dict(usage)})
    events.append({"type": MESSAGE_STOP})
    return events


def opened_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block as its ``content_block_start`` shows it, before any delta."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": ""}
    if kind == "tool_use":
        return {**block, "input": {}}
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return copy.deepcopy(dict(block))


def block_deltas(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The deltas that fill an ``opened_block`` to ``block``."""
    kind = block.get("type")
    if kind == "text":
        text = block.get("text") or ""
        return [{"type": "text_delta", "text": text}] if text else []
    if kind == "tool_use":
        value = block.get("input")
        partial = orjson.dumps(value).decode() if isinstance(value, dict) else "{}"
        return [{"type": "input_json_delta", "partial_json": partial}]
    if kind == "thinking":
        deltas = []
        if block.get("thinking"):
            deltas.append({"type": "thinking_delta", "thinking": block["thinking"]})
        deltas.append({"type": "signature_delta", "signature": block.get("signature") or ""})
        return deltas
    return []


# --- replays with fresh ids -------------------------------------------------------------


class Refresher:
    """Makes a stored message new for a replay: a fresh ``msg_`` id. Tool use ids stay
    (``ids`` says why); messages carry no timestamp or sequence number."""

    __slots__ = ("message_id",)

    def __init__(self, message_id: str | None = None) -> None:
        self.message_id = message_id if message_id is not None else ids.new_message_id()

    def body(self, body: bytes) -> bytes:
        message = orjson.loads(body)
        if not isinstance(message, dict):
            raise ValueError("not a Messages API message")
        return orjson.dumps({**message, "id": self.message_id})

    def events(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        fresh: list[dict[str, Any]] = []
        for event in events:
            if event.get("type") == MESSAGE_START and isinstance(event.get("message"), Mapping):
                event = {**event, "message": {**event["message"], "id": self.message_id}}
            fresh.append(dict(event))
        return fresh


# --- count_tokens -----------------------------------------------------------------------

# Pieces a BPE tokenizer mostly keeps whole: a run of ASCII letters, up to 3 digits, one
# newline run, any other character alone (punctuation, CJK, emoji).
_PIECES = re.compile(r"[A-Za-z]+|\d{1,3}|\n+|[^\sA-Za-z\d]")
_CHARS_PER_WORD_TOKEN = 7  # an English word up to 7 letters is about one token
_TOKENS_PER_MESSAGE = 3  # role and turn markers
_TOKENS_PER_REQUEST = 3
# Anthropic's tool-use system prompt (its docs: 346 tokens for auto/none, 313 for any/tool
# on the Claude 4 models), added once when tools are given.
_TOOL_PROMPT_TOKENS = {"auto": 346, "none": 346, "any": 313, "tool": 313}
_MAX_IMAGE_TOKENS = 1600  # Anthropic resizes past ~1.15 megapixels: about 1,600 tokens
_PIXELS_PER_IMAGE_TOKEN = 750  # Anthropic: tokens = width x height / 750
_TOKENS_PER_PDF_PAGE = 1500  # Anthropic: 1,500 to 3,000 a page (text plus a page image)


def text_tokens(text: str) -> int:
    """An estimate of ``text``'s tokens."""
    count = 0
    for piece in _PIECES.findall(text):
        if piece[0].isascii() and piece[0].isalpha():
            count += math.ceil(len(piece) / _CHARS_PER_WORD_TOKEN)
        else:
            count += 1
    return count


def count_tokens(body: Mapping[str, Any]) -> int:
    """An honest estimate of the input tokens of a Messages request (no tokenizer of
    Anthropic's ships): text is cut into the pieces BPE tokenizers mostly keep whole (an
    ASCII word is one token per 6 letters, up to 3 digits one, other characters one each);
    3 tokens per message and per request for the turn markers; tool definitions as their
    JSON plus Anthropic's documented tool-use system prompt; images at Anthropic's width x
    height / 750 (dimensions read from a base64 PNG or GIF header, capped at 1,600 tokens,
    1,600 when unknown); PDFs at 1,500 tokens a page. Within tens of percent of Claude's
    counts on English prose, not exact."""
    total = _TOKENS_PER_REQUEST
    system = body.get("system")
    if isinstance(system, str):
        total += text_tokens(system)
    else:
        total += sum(_block_tokens(block) for block in _objects(system))
    tools = [tool for tool in _objects(body.get("tools"))]
    if tools:
        choice = body.get("tool_choice")
        kind = choice.get("type") if isinstance(choice, dict) else "auto"
        total += _TOOL_PROMPT_TOKENS.get(str(kind), _TOOL_PROMPT_TOKENS["auto"])
        for tool in tools:
            described = {key: value for key, value in tool.items() if key != "cache_control"}
            total += text_tokens(orjson.dumps(described).decode())
    for message in _objects(body.get("messages")):
        total += _TOKENS_PER_MESSAGE
        content = message.get("content")
        if isinstance(content, str):
            total += text_tokens(content)
        else:
            total += sum(_block_tokens(block) for block in _objects(content))
    return total


def _block_tokens(block: Mapping[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return text_tokens(str(block.get("text", "")))
    if kind == "thinking":
        return text_tokens(str(block.get("thinking", "")))
    if kind == "tool_use":
        return text_tokens(str(block.get("name", ""))) + text_tokens(
            orjson.dumps(block.get("input")).decode()
        )
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return text_tokens(content) + _TOKENS_PER_MESSAGE
        return _TOKENS_PER_MESSAGE + sum(_block_tokens(inner) for inner in _objects(content))
    if kind == "image":
        return image_tokens(block.get("source"))
    if kind == "document":
        return _document_tokens(block.get("source"))
    return text_tokens(orjson.dumps(block).decode())


def image_tokens(source: Any) -> int:
    """Anthropic's width x height / 750, from a base64 PNG or GIF's header; else 1,600."""
    size = _image_size(source) if isinstance(source, Mapping) else None
    if size is None:
        return _MAX_IMAGE_TOKENS
    width, height = size
    return max(1, min(_MAX_IMAGE_TOKENS, math.ceil(width * height / _PIXELS_PER_IMAGE_TOKEN)))


def _decoded_head(source: Mapping[str, Any], num_chars: int) -> bytes | None:
    data = source.get("data")
    if source.get("type") != "base64" or not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data[:num_chars], validate=False)
    except (binascii.Error, ValueError):
        return None


def _image_size(source: Mapping[str, Any]) -> tuple[int, int] | None:
    head = _decoded_head(source, 64)
    if head is None:
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    return None


_PDF_PAGE = re.compile(rb"/Type\s*/Page(?!s)")


def _document_tokens(source: Any) -> int:
    if not isinstance(source, Mapping):
        return _TOKENS_PER_PDF_PAGE
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return text_tokens(source["data"])
    data = source.get("data")
    if source.get("type") == "base64" and isinstance(data, str):
        try:
            pdf = base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError):
            return _TOKENS_PER_PDF_PAGE
        return _TOKENS_PER_PDF_PAGE * max(1, len(_PDF_PAGE.findall(pdf)))
    return _TOKENS_PER_PDF_PAGE

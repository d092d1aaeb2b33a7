"""The OpenAI Responses API on the wire: requests, stream events, whole responses, errors.

As the openai Python SDK (``openai.types.responses``) parses them:

- A request (``POST /v1/responses``) is checked by ``check_request``: clear 400s naming the
  parameter, before any upstream call; fields it does not know pass (a native upstream gets
  them).
- A stream is typed SSE: every event has an ``event:`` line naming its ``type`` and an
  increasing ``sequence_number``; ``response.created`` and ``response.in_progress`` open
  it, output items follow (``response.output_item.added``, for a message
  ``response.content_part.added``, ``response.output_text.delta``...,
  ``response.output_text.done``, ``response.content_part.done``; for a function call
  ``response.function_call_arguments.delta``... and ``.done``; then
  ``response.output_item.done``), and ``response.completed``, ``response.incomplete`` or
  ``response.failed`` (carrying the whole response) ends it. No ``[DONE]``.
- A non-stream answer is the Response object itself, the same object the terminal event
  carries.

``StreamMerge`` turns a whole stream into that object; ``body_to_events`` does the
reverse for a stored answer; ``Refresher`` gives a replayed answer a fresh ``resp_`` id,
fresh item ids and timestamp, and sequence numbers 0..n.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from hasten.apis import fields, ids
from hasten.apis.fields import (
    in_range,
    int_at_least,
    is_bool,
    is_list,
    is_object,
    is_str,
    is_text,
    one_of,
)
from hasten.apis.usage import Usage, from_responses, to_responses
from hasten.errors import InvalidRequest, UpstreamError

CREATED = "response.created"
IN_PROGRESS = "response.in_progress"
QUEUED = "response.queued"
COMPLETED = "response.completed"
INCOMPLETE = "response.incomplete"
FAILED = "response.failed"
ERROR = "error"
ITEM_ADDED = "response.output_item.added"
ITEM_DONE = "response.output_item.done"
PART_ADDED = "response.content_part.added"
PART_DONE = "response.content_part.done"
TEXT_DELTA = "response.output_text.delta"
TEXT_DONE = "response.output_text.done"
REFUSAL_DELTA = "response.refusal.delta"
REFUSAL_DONE = "response.refusal.done"
ARGUMENTS_DELTA = "response.function_call_arguments.delta"
ARGUMENTS_DONE = "response.function_call_arguments.done"
REASONING_DELTA = "response.reasoning_text.delta"
REASONING_DONE = "response.reasoning_text.done"
SUMMARY_PART_ADDED = "response.reasoning_summary_part.added"
SUMMARY_PART_DONE = "response.reasoning_summary_part.done"
SUMMARY_DELTA = "response.reasoning_summary_text.delta"
SUMMARY_DONE = "response.reasoning_summary_text.done"

TERMINAL_EVENTS = frozenset({COMPLETED, INCOMPLETE, FAILED, ERROR})
COMPLETE_EVENTS = frozenset({COMPLETED, INCOMPLETE})
# The first token: the model has begun its answer (text, refusal, reasoning, call arguments).
OUTPUT_DELTAS = frozenset(
    {
        TEXT_DELTA,
        REFUSAL_DELTA,
        ARGUMENTS_DELTA,
        REASONING_DELTA,
        SUMMARY_DELTA,
        "response.custom_tool_call_input.delta",
        "response.audio.delta",
        "response.audio.transcript.delta",
        "response.code_interpreter_call_code.delta",
        "response.mcp_call_arguments.delta",
    }
)
# Items whose content arrives in deltas: added, they carry no output yet.
_CONTENT_ITEMS = frozenset({"message", "reasoning"})
STREAM_ERROR_CODE = "upstream_stream_error"

_ROLES = ("user", "assistant", "system", "developer")
_TOOL_CHOICE_MODES = ("none", "auto", "required")
_TEXT_FORMATS = ("text", "json_object", "json_schema")
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_TOP_LOGPROBS = 20
_WHITESPACE = re.compile(r"\s+")

# What a Response object echoes of its request when the request left a field out.
_ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "safety_identifier": None,
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "tool_choice": "auto",
    "tools": [],
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}
_DEFAULT_TEXT = {"format": {"type": "text"}, "verbosity": "medium"}

# --- requests --------------------------------------------------------------------------


def check_request(body: Mapping[str, Any]) -> None:
    """Raises ``InvalidRequest`` naming the first parameter that is missing or invalid."""
    fields.require(body, "model", is_text, "a non-empty string", "model")
    _check_input(body)
    fields.optional(body, "instructions", is_str, "a string", "instructions")
    for name in ("stream", "store", "background", "parallel_tool_calls"):
        fields.optional(body, name, is_bool, "a boolean", name)
    fields.optional(body, "temperature", in_range(0, 2), "a number from 0 to 2", "temperature")
    fields.optional(body, "top_p", in_range(0, 1), "a number from 0 to 1", "top_p")
    fields.optional(
        body, "max_output_tokens", int_at_least(1), "an integer >= 1", "max_output_tokens"
    )
    fields.optional(body, "max_tool_calls", int_at_least(1), "an integer >= 1", "max_tool_calls")
    fields.optional(
        body,
        "top_logprobs",
        lambda v: fields.is_int(v) and 0 <= v <= MAX_TOP_LOGPROBS,
        f"an integer from 0 to {MAX_TOP_LOGPROBS}",
        "top_logprobs",
    )
    fields.optional(
        body, "previous_response_id", is_text, "a non-empty string", "previous_response_id"
    )
    if body.get("background") is True and body.get("store") is False:
        raise InvalidRequest(
            "Invalid 'background': background mode requires 'store' to be true.",
            param="background",
            code="invalid_value",
        )
    _check_tools(body)
    _check_tool_choice(body.get("tool_choice"))
    _check_text(body.get("text"))
    reasoning = fields.optional(body, "reasoning", is_object, "an object", "reasoning")
    if reasoning is not None:
        fields.optional(reasoning, "effort", is_str, "a string", "reasoning.effort")
        fields.optional(reasoning, "summary", is_str, "a string", "reasoning.summary")
    check_metadata(body.get("metadata"), "metadata")
    include = fields.optional(body, "include", is_list, "an array of strings", "include")
    if include is not None and not all(isinstance(name, str) for name in include):
        raise fields.invalid("include", "an array of strings", include)
    fields.optional(
        body, "truncation", one_of("auto", "disabled"), "'auto' or 'disabled'", "truncation"
    )
    for name in ("user", "prompt_cache_key", "safety_identifier", "service_tier"):
        fields.optional(body, name, is_str, "a string", name)
    options = fields.optional(body, "stream_options", is_object, "an object", "stream_options")
    if options is not None and body.get("stream") is not True:
        raise InvalidRequest(
            "'stream_options' is only allowed when 'stream' is true.",
            param="stream_options",
            code="invalid_value",
        )


def check_metadata(metadata: Any, param: str) -> None:
    """OpenAI's metadata rules: up to 16 string values, keys <= 64 and values <= 512 chars."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise fields.invalid(param, "an object", metadata)
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequest(
            f"Invalid '{param}': at most {MAX_METADATA_PAIRS} key-value pairs.",
            param=param,
            code="invalid_value",
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"Invalid '{param}': keys are at most {MAX_METADATA_KEY_CHARS} characters.",
                param=param,
                code="invalid_value",
            )
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise fields.invalid(
                f"{param}.{key}", f"a string of at most {MAX_METADATA_VALUE_CHARS} chars", value
            )


def _check_input(body: Mapping[str, Any]) -> None:
    value = body.get("input")
    if value is None:
        # A stored prompt or conversation may stand for the input; nothing else may.
        if any(body.get(name) is not None for name in ("previous_response_id", "prompt")):
            return
        raise fields.missing("input")
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise fields.invalid("input", "a string or an array of input items", value)
    for index, item in enumerate(value):
        if not _is_plain_item(item):
            check_input_item(item, f"input[{index}]")


def _is_plain_item(item: Any) -> bool:
    """Whether ``item`` is of the kinds an agent's history is made of, and sound: a message
    of text, a function call, its output. Such an item needs no other check, and the
    parameter names a 400 would use (``input[12].content[0].text``) are then never built:
    on a long history that formatting was most of the check's cost. Anything else, or
    anything wrong, goes through ``check_input_item``, which names what is wrong."""
    if type(item) is not dict:
        return False
    kind = item.get("type")
    if kind == "function_call":
        return (
            is_text(item.get("call_id"))
            and is_text(item.get("name"))
            and type(item.get("arguments")) is str
        )
    if kind == "function_call_output":
        return is_text(item.get("call_id")) and type(item.get("output")) is str
    if kind == "message" or (kind is None and "role" in item):
        if item.get("role") not in _ROLES:
            return False
        content = item.get("content")
        return type(content) is str or (type(content) is list and all(map(_is_text_part, content)))
    return False


def _is_text_part(part: Any) -> bool:
    return (
        type(part) is dict
        and part.get("type") in ("input_text", "output_text")
        and type(part.get("text")) is str
    )


def is_named_output(item: Mapping[str, Any]) -> bool:
    """A ``function_call_output`` that answers no call of the model's but names the tool it
    comes from, with no ``call_id``: context a client adds itself (Codex 0.171 sends its
    ``agent`` namespace's ``goal_objective`` so)."""
    return "call_id" not in item and is_text(item.get("name"))


def check_input_item(item: Any, param: str) -> None:
    """One input item; item types this does not know pass if they name their ``type``."""
    if not isinstance(item, dict):
        raise fields.invalid(param, "an object", item)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"
    if not isinstance(kind, str):
        raise fields.missing(f"{param}.type")
    if kind == "message":
        role = fields.require(
            item, "role", one_of(*_ROLES), "one of " + ", ".join(_ROLES), f"{param}.role"
        )
        _check_content(item.get("content"), f"{param}.content", role)
    elif kind == "function_call":
        fields.require(item, "call_id", is_text, "a non-empty string", f"{param}.call_id")
        fields.require(item, "name", is_text, "a non-empty string", f"{param}.name")
        fields.require(item, "arguments", is_str, "a string", f"{param}.arguments")
    elif kind == "function_call_output":
        if not is_named_output(item):
            fields.require(item, "call_id", is_text, "a non-empty string", f"{param}.call_id")
        output = item.get("output")
        if not isinstance(output, str | list):
            raise fields.invalid(f"{param}.output", "a string or an array", output)
    elif kind == "item_reference":
        fields.require(item, "id", is_text, "a non-empty string", f"{param}.id")


def _check_content(content: Any, param: str, role: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise fields.invalid(param, "a string or an array of content parts", content)
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise fields.invalid(where, "a content part with a type", part)
        kind = part["type"]
        if kind in ("input_text", "output_text"):
            fields.require(part, "text", is_str, "a string", f"{where}.text")
        elif kind == "refusal":
            fields.require(part, "refusal", is_str, "a string", f"{where}.refusal")
        elif kind == "input_image" and not any(
            isinstance(part.get(name), str) for name in ("image_url", "file_id")
        ):
            raise fields.missing(f"{where}.image_url")


def _check_tools(body: Mapping[str, Any]) -> None:
    tools = fields.optional(body, "tools", is_list, "an array", "tools")
    for index, tool in enumerate(tools or ()):
        param = f"tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise fields.invalid(param, "a tool object with a type", tool)
        if tool["type"] == "function":
            fields.require(tool, "name", is_text, "a non-empty string", f"{param}.name")
            fields.optional(
                tool, "parameters", is_object, "a JSON schema object", f"{param}.parameters"
            )
            fields.optional(tool, "description", is_str, "a string", f"{param}.description")
            fields.optional(tool, "strict", is_bool, "a boolean", f"{param}.strict")


def _check_tool_choice(choice: Any) -> None:
    if choice is None or choice in _TOOL_CHOICE_MODES:
        return
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise fields.invalid("tool_choice", "'none', 'auto', 'required' or an object", choice)
    if choice["type"] == "function":
        fields.require(choice, "name", is_text, "a non-empty string", "tool_choice.name")
    elif choice["type"] == "allowed_tools":
        fields.require(
            choice, "mode", one_of("auto", "required"), "'auto' or 'required'", "tool_choice.mode"
        )
        fields.require(choice, "tools", is_list, "an array", "tool_choice.tools")


def _check_text(text: Any) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise fields.invalid("text", "an object", text)
    fields.optional(
        text, "verbosity", one_of("low", "medium", "high"), "low, medium or high", "text.verbosity"
    )
    form = fields.optional(text, "format", is_object, "an object", "text.format")
    if form is None:
        return
    kind = fields.require(
        form, "type", one_of(*_TEXT_FORMATS), "text, json_object or json_schema", "text.format.type"
    )
    if kind == "json_schema":
        fields.require(form, "name", is_text, "a non-empty string", "text.format.name")
        fields.require(form, "schema", is_object, "a JSON schema object", "text.format.schema")


def last_user_text(body: Mapping[str, Any]) -> str | None:
    """The text of the final user turn (the semantic cache's question), whitespace folded;
    None when the input does not end with a user message of text alone (a tool output, an
    image: an answer that depends on more than the words)."""
    value = body.get("input")
    if isinstance(value, str):
        return _WHITESPACE.sub(" ", value).strip() or None
    if not isinstance(value, list) or not value:
        return None
    last = value[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    if last.get("type", "message") != "message":
        return None
    content = last.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "input_text":
                return None
            if not isinstance(part.get("text"), str):
                return None
            parts.append(part["text"])
        text = " ".join(parts)
    else:
        return None
    return _WHITESPACE.sub(" ", text).strip() or None


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    return value if fields.is_int(value) else None


# --- stream events ----------------------------------------------------------------------


def is_output_event(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` shows the model's answer has begun (the first token), or ends the
    stream: an output delta, an output item that carries output of its own (a function
    call, a hosted tool's call), or a terminal event."""
    kind = event.get("type")
    if kind in OUTPUT_DELTAS or kind in TERMINAL_EVENTS:
        return True
    if kind in (ITEM_ADDED, ITEM_DONE):
        item = event.get("item")
        if not isinstance(item, Mapping):
            return False
        if item.get("type") not in _CONTENT_ITEMS:
            return True
        return kind == ITEM_DONE and bool(item.get("content") or item.get("summary"))
    return False


def is_terminal(event: Mapping[str, Any]) -> bool:
    return event.get("type") in TERMINAL_EVENTS


def is_complete(event: Mapping[str, Any]) -> bool:
    """A whole answer that may be stored: ``response.completed`` or ``response.incomplete``
    (cut at ``max_output_tokens``, say: complete as an answer to that request)."""
    return event.get("type") in COMPLETE_EVENTS


def event_error(event: Mapping[str, Any]) -> UpstreamError | None:
    """The failure an ``error`` or ``response.failed`` event reports; None for the others."""
    kind = event.get("type")
    if kind == ERROR:
        message, code = event.get("message"), event.get("code")
    elif kind == FAILED:
        response = event.get("response")
        error = response.get("error") if isinstance(response, Mapping) else None
        if not isinstance(error, Mapping):
            error = {}
        message, code = error.get("message"), error.get("code")
    else:
        return None
    text = message if isinstance(message, str) and message else "upstream error"
    return UpstreamError(
        f"upstream error mid-stream: {text}",
        code=code if isinstance(code, str) and code else STREAM_ERROR_CODE,
    )


def usage_of(event: Mapping[str, Any]) -> Usage | None:
    """Token counts of a terminal event's response; None for other events or no usage."""
    if event.get("type") not in (COMPLETED, INCOMPLETE, FAILED):
        return None
    response = event.get("response")
    return from_responses(response.get("usage")) if isinstance(response, Mapping) else None


def frame(event: Mapping[str, Any] | bytes) -> bytes:
    """One SSE event as OpenAI writes it: ``event: <type>``, ``data: <json>``, a blank line.

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
        raise ValueError("a Responses event needs a one-line type")
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


# --- response objects -------------------------------------------------------------------


def new_response(
    request: Mapping[str, Any],
    *,
    response_id: str,
    created_at: int,
    model: str | None = None,
    status: str = "in_progress",
    output: Sequence[Mapping[str, Any]] = (),
    usage: Usage | None = None,
    error: Mapping[str, Any] | None = None,
    incomplete_reason: str | None = None,
) -> dict[str, Any]:
    """A Response object for ``request``: the fields given, the rest echoed from the request
    (or OpenAI's defaults where it left them out)."""
    echo = {name: request.get(name, default) for name, default in _ECHO_DEFAULTS.items()}
    for name, default in _ECHO_DEFAULTS.items():
        if echo[name] is None and default is not None:
            echo[name] = default
    reasoning = request.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, Mapping) else {}
    text = request.get("text")
    text = {**_DEFAULT_TEXT, **text} if isinstance(text, Mapping) else dict(_DEFAULT_TEXT)
    metadata = request.get("metadata")
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": request.get("background") is True,
        "error": dict(error) if error is not None else None,
        "incomplete_details": None if incomplete_reason is None else {"reason": incomplete_reason},
        "instructions": echo["instructions"],
        "max_output_tokens": echo["max_output_tokens"],
        "max_tool_calls": echo["max_tool_calls"],
        "model": model if model is not None else request.get("model"),
        "output": [dict(item) for item in output],
        "parallel_tool_calls": echo["parallel_tool_calls"],
        "previous_response_id": echo["previous_response_id"],
        "prompt_cache_key": echo["prompt_cache_key"],
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": echo["safety_identifier"],
        "service_tier": echo["service_tier"],
        "store": echo["store"],
        "temperature": echo["temperature"],
        "text": text,
        "tool_choice": echo["tool_choice"],
        "tools": echo["tools"],
        "top_logprobs": echo["top_logprobs"],
        "top_p": echo["top_p"],
        "truncation": echo["truncation"],
        "usage": None if usage is None else to_responses(usage),
        "user": echo["user"],
        "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
    }
    return response


def output_text(response: Mapping[str, Any]) -> str:
    """Every ``output_text`` of the response's messages, joined (the SDK's ``output_text``)."""
    texts: list[str] = []
    for item in response.get("output") or ():
        if isinstance(item, Mapping) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    texts.append(str(part.get("text", "")))
    return "".join(texts)


class EventSequence:
    """Events being built for one stream, numbered as they are added."""

    __slots__ = ("events", "next_number")

    def __init__(self, first_number: int = 0) -> None:
        self.events: list[dict[str, Any]] = []
        self.next_number = first_number

    def add(self, kind: str, **payload: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.next_number, **payload}
        self.next_number += 1
        self.events.append(event)
        return event

    def take(self) -> list[dict[str, Any]]:
        """The events added since the last take."""
        events, self.events = self.events, []
        return events


def failed_event(
    message: str,
    code: str = "server_error",
    *,
    response: Mapping[str, Any] | None = None,
    response_id: str | None = None,
    model: str | None = None,
    created_at: int = 0,
    sequence_number: int = 0,
) -> dict[str, Any]:
    """The ``response.failed`` event a broken stream ends with. ``response`` is the response
    as far as the client has it (``StreamMerge.snapshot()``); without it a bare one is built
    from ``response_id`` (fresh if None), ``model`` and ``created_at``."""
    error = {"code": code, "message": message}
    if response is not None:
        failed = copy.deepcopy(dict(response))
        failed["status"] = "failed"
        failed["error"] = error
    else:
        failed = new_response(
            {"model": model},
            response_id=response_id or ids.new_response_id(),
            created_at=created_at,
            status="failed",
            error=error,
        )
    return {"type": FAILED, "sequence_number": sequence_number, "response": failed}


def error_event(
    message: str, code: str | None = None, param: str | None = None, sequence_number: int = 0
) -> dict[str, Any]:
    """An ``error`` event (OpenAI sends it for a failure before the response exists)."""
    return {
        "type": ERROR,
        "sequence_number": sequence_number,
        "code": code,
        "message": message,
        "param": param,
    }


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
}


def error_body(
    status: int, message: str, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``, the type
    following the status as OpenAI's do (5xx: ``server_error``)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def is_previous_not_found(body: bytes) -> bool:
    """Whether an error ``body`` says the request's ``previous_response_id`` is unknown:
    OpenAI's ``previous_response_not_found`` (``param: previous_response_id``), or a
    terser ``Invalid `previous_response_id`.`` as some Responses backends send."""
    if b"previous_response" not in body:
        return False
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return False
    if not isinstance(error, dict):
        return False
    message = error.get("message")
    return (
        error.get("code") == "previous_response_not_found"
        or error.get("param") == "previous_response_id"
        or (isinstance(message, str) and "previous_response_id" in message)
    )


# --- merging a stream into a body -------------------------------------------------------


class StreamMerge:
    """Fed a stream's parsed events in order; ``body()`` is the Response object a
    non-stream call returns, ``snapshot()`` the response as far as it has come.

    Deltas are kept as lists of pieces and joined when the output is read: adding to a
    string per delta would copy the whole text each time (quadratic in a long answer).
    An item is held as its event gave it, copied only when the merge must change it (a
    part added, its pieces joined): the final event of a native stream carries the whole
    output, so the items it read are then never read at all, and copying every finished
    item (its whole text) was most of what merging a native answer cost."""

    __slots__ = ("_failed", "_final", "_items", "_owned", "_pieces", "_response")

    def __init__(self) -> None:
        self._response: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        self._owned: set[int] = set()  # output indexes whose item is the merge's own copy
        # output index -> (content index, or -1 for the item itself; field) -> pieces
        self._pieces: dict[int, dict[tuple[int, str], list[str]]] = {}
        self._final: dict[str, Any] | None = None
        self._failed = False

    def add(self, event: Mapping[str, Any]) -> None:
        """One parsed event; raises ValueError for one without the Responses shape."""
        try:
            self._add(event)
        except (AttributeError, KeyError, TypeError, IndexError) as exc:
            raise ValueError("stream event does not have the Responses shape") from exc

    def _add(self, event: Mapping[str, Any]) -> None:
        kind = event["type"]
        if kind in (TEXT_DELTA, REASONING_DELTA):  # deltas first: the hot path
            self._delta(event, _index(event, "content_index"), "text")
        elif kind == ARGUMENTS_DELTA:
            self._delta(event, -1, "arguments")
        elif kind == REFUSAL_DELTA:
            self._delta(event, _index(event, "content_index"), "refusal")
        elif kind in (CREATED, IN_PROGRESS, QUEUED):
            self._response = _require_response(event)
        elif kind in (ITEM_ADDED, ITEM_DONE):
            item = event["item"]
            if not isinstance(item, dict):
                raise TypeError("item")
            index = _index(event, "output_index")
            self._items[index] = item  # the event's own: not changed here (see _own)
            self._owned.discard(index)
            self._pieces.pop(index, None)  # the item as given is the item
        elif kind == PART_ADDED:
            item = self._own(_index(event, "output_index"))
            item.setdefault("content", []).append(dict(event["part"]))
        elif kind in COMPLETE_EVENTS:
            self._final = _require_response(event)
        elif kind in (FAILED, ERROR):
            self._failed = True

    def _own(self, index: int) -> dict[str, Any]:
        """The item at ``index``, the merge's own copy from now on."""
        item = self._items[index]
        if index not in self._owned:
            item = self._items[index] = copy.deepcopy(item)
            self._owned.add(index)
        return item

    def _delta(self, event: Mapping[str, Any], content_index: int, name: str) -> None:
        index = _index(event, "output_index")
        fields_pieces = self._pieces.setdefault(index, {})
        pieces = fields_pieces.get((content_index, name))
        if pieces is None:
            item = self._items[index]
            target = item if content_index < 0 else item["content"][content_index]
            pieces = fields_pieces[(content_index, name)] = [_text(target[name])]
        pieces.append(_text(event["delta"]))

    @property
    def is_whole(self) -> bool:
        return self._final is not None and not self._failed

    def output(self) -> list[dict[str, Any]]:
        for index, fields_pieces in self._pieces.items():
            item = self._own(index)
            for (content_index, name), pieces in fields_pieces.items():
                target = item if content_index < 0 else item["content"][content_index]
                target[name] = "".join(pieces)
        return [self._items[index] for index in sorted(self._items)]

    def snapshot(self) -> dict[str, Any] | None:
        """The response as far as the stream has come (None before ``response.created``)."""
        base = self._final or self._response
        if base is None:
            return None
        snapshot = dict(base)
        snapshot["output"] = copy.deepcopy(self.output())
        return snapshot

    def body(self) -> bytes:
        """The whole answer; ValueError if the stream did not end with ``response.completed``
        or ``response.incomplete``, or failed."""
        if self._failed:
            raise ValueError("the stream failed")
        if self._final is None:
            raise ValueError("the stream ended before its response was complete")
        final = self._final
        if not final.get("output") and self._items:
            final = {**final, "output": self.output()}
        return orjson.dumps(final)


def _require_response(event: Mapping[str, Any]) -> dict[str, Any]:
    response = event["response"]
    if not isinstance(response, dict) or not isinstance(response.get("id"), str):
        raise TypeError("response")
    return response


def _index(event: Mapping[str, Any], name: str) -> int:
    value = event[name]
    if not fields.is_int(value) or value < 0:
        raise TypeError(name)
    return int(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("delta")
    return value


# --- a stored answer as a stream --------------------------------------------------------


def parse_body(body: bytes | Mapping[str, Any]) -> dict[str, Any]:
    """A whole Response object (completed or incomplete); ValueError for anything else."""
    response = orjson.loads(body) if isinstance(body, bytes | bytearray) else dict(body)
    if (
        not isinstance(response, dict)
        or response.get("object") != "response"
        or not isinstance(response.get("id"), str)
        or not isinstance(response.get("output"), list)
    ):
        raise ValueError("not a Responses API response object")
    if response.get("status") not in ("completed", "incomplete"):
        raise ValueError("a response that is not complete")
    return response


def body_to_events(body: bytes | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events a stream client gets for a stored non-stream answer, as OpenAI sends
    them: each text in one delta. Raises ValueError for a body that is not a whole
    Response object."""
    response = parse_body(body)
    sequence = EventSequence()
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    opening["incomplete_details"] = None
    sequence.add(CREATED, response=opening)
    sequence.add(IN_PROGRESS, response=copy.deepcopy(opening))
    for index, item in enumerate(response["output"]):
        if not isinstance(item, dict):
            raise ValueError("an output item that is not an object")
        item_events(sequence, item, index)
    end = COMPLETED if response["status"] == "completed" else INCOMPLETE
    sequence.add(end, response=response)
    return sequence.take()


def item_events(sequence: EventSequence, item: Mapping[str, Any], output_index: int) -> None:
    """The events that stream one finished output item."""
    kind = item.get("type")
    item_id = item.get("id")
    where = {"item_id": item_id, "output_index": output_index}
    if kind == "message":
        sequence.add(ITEM_ADDED, output_index=output_index, item=_opened(item, content=[]))
        for content_index, part in enumerate(item.get("content") or ()):
            _part_events(sequence, part, {**where, "content_index": content_index})
    elif kind == "function_call":
        sequence.add(ITEM_ADDED, output_index=output_index, item=_opened(item, arguments=""))
        arguments = item.get("arguments") or ""
        if arguments:
            sequence.add(ARGUMENTS_DELTA, **where, delta=arguments)
        sequence.add(ARGUMENTS_DONE, **where, arguments=arguments)
    elif kind == "reasoning":
        opened = _opened(item, summary=[])
        if "content" in item:
            opened["content"] = []
        sequence.add(ITEM_ADDED, output_index=output_index, item=opened)
        for summary_index, part in enumerate(item.get("summary") or ()):
            text = part.get("text", "") if isinstance(part, Mapping) else ""
            at = {**where, "summary_index": summary_index}
            sequence.add(SUMMARY_PART_ADDED, **at, part={"type": "summary_text", "text": ""})
            if text:
                sequence.add(SUMMARY_DELTA, **at, delta=text)
            sequence.add(SUMMARY_DONE, **at, text=text)
            sequence.add(SUMMARY_PART_DONE, **at, part={"type": "summary_text", "text": text})
        for content_index, part in enumerate(item.get("content") or ()):
            _part_events(sequence, part, {**where, "content_index": content_index})
    else:
        sequence.add(ITEM_ADDED, output_index=output_index, item=copy.deepcopy(dict(item)))
    sequence.add(ITEM_DONE, output_index=output_index, item=copy.deepcopy(dict(item)))


def _opened(item: Mapping[str, Any], **empty: Any) -> dict[str, Any]:
    opened = {**copy.deepcopy(dict(item)), **empty}
    if "status" in opened:
        opened["status"] = "in_progress"
    return opened


def _part_events(sequence: EventSequence, part: Any, where: dict[str, Any]) -> None:
    if not isinstance(part, Mapping):
        raise ValueError("a content part that is not an object")
    kind = part.get("type")
    if kind == "output_text":
        text = part.get("text", "")
        empty = {**part, "text": ""}
        if "logprobs" in part:
            empty["logprobs"] = []
        sequence.add(PART_ADDED, **where, part=empty)
        logprobs = part.get("logprobs") or []
        if text:
            sequence.add(TEXT_DELTA, **where, delta=text, logprobs=logprobs)
        sequence.add(TEXT_DONE, **where, text=text, logprobs=logprobs)
    elif kind == "refusal":
        refusal = part.get("refusal", "")
        sequence.add(PART_ADDED, **where, part={**part, "refusal": ""})
        if refusal:
            sequence.add(REFUSAL_DELTA, **where, delta=refusal)
        sequence.add(REFUSAL_DONE, **where, refusal=refusal)
    elif kind == "reasoning_text":
        text = part.get("text", "")
        sequence.add(PART_ADDED, **where, part={**part, "text": ""})
        if text:
            sequence.add(REASONING_DELTA, **where, delta=text)
        sequence.add(REASONING_DONE, **where, text=text)
    else:
        sequence.add(PART_ADDED, **where, part=dict(part))
    sequence.add(PART_DONE, **where, part=dict(part))


# --- replays with fresh ids -------------------------------------------------------------


class Refresher:
    """Makes a stored answer new for a replay: a fresh response id (``resp_``), item ids
    derived from it, ``created_at`` now and, for a stream, sequence numbers 0..n. Tool call
    ids stay (``ids`` says why). One refresher per replay: the body and the events it
    refreshes get the same ids."""

    __slots__ = ("created_at", "response_id")

    def __init__(self, created_at: int, response_id: str | None = None) -> None:
        self.created_at = created_at
        self.response_id = response_id if response_id is not None else ids.new_response_id()

    def body(self, body: bytes) -> bytes:
        """A stored Response object, refreshed; ValueError if it is not one."""
        response = orjson.loads(body)
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            raise ValueError("not a Responses API response object")
        return orjson.dumps(self.response(response))

    def response(self, response: Mapping[str, Any]) -> dict[str, Any]:
        fresh = dict(response)
        fresh["id"] = self.response_id
        if "created_at" in fresh:
            fresh["created_at"] = self.created_at
        if "completed_at" in fresh and fresh["completed_at"] is not None:
            fresh["completed_at"] = self.created_at
        output = response.get("output")
        if isinstance(output, list):
            fresh["output"] = [self._item(item, index) for index, item in enumerate(output)]
        return fresh

    def _item(self, item: Any, index: int) -> Any:
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            return item
        return {**item, "id": self._item_id(item["id"], index)}

    def _item_id(self, old_id: str, index: int) -> str:
        prefix, underscore, _ = old_id.partition("_")
        return ids.item_id(prefix if underscore else "item", self.response_id, index)

    def events(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Stored stream events, refreshed and numbered from 0."""
        fresh_events: list[dict[str, Any]] = []
        for number, event in enumerate(events):
            fresh = dict(event)
            fresh["sequence_number"] = number
            if isinstance(fresh.get("response"), Mapping):
                fresh["response"] = self.response(fresh["response"])
            index = fresh.get("output_index")
            if isinstance(index, int):
                if isinstance(fresh.get("item"), Mapping):
                    fresh["item"] = self._item(fresh["item"], index)
                if isinstance(fresh.get("item_id"), str):
                    fresh["item_id"] = self._item_id(fresh["item_id"], index)
            fresh_events.append(fresh)
        return fresh_events

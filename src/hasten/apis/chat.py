"""OpenAI's Chat Completions and (legacy) Completions APIs on the wire, the pivot every
other API is translated to and from.

Requests checked with clear 400s naming the parameter; stream events read (the first token,
an error event, a proper end: ``[DONE]`` after a finish_reason for every choice); a stream
merged into the body a non-stream call returns (``chunks_to_body``, ``BodyMerge``) and a body
split back into chunks (``body_to_chunks``); SSE frames ending with ``[DONE]``, the
trailing usage-only chunk only for a client that asked for usage. ``CHAT`` and
``COMPLETIONS`` are the two as ``hasten.apis.api.Api``. Malformed answers raise
``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from hasten.apis.api import ParamFields
from hasten.errors import HastenError, InvalidRequest, UpstreamError
from hasten.values.usage import is_usage_chunk
from hasten.wire.asgi import sse_event

CHAT = "chat"
COMPLETIONS = "completions"

_DONE_FRAME = b"data: [DONE]\n\n"
_HEAD_FIELDS = ("id", "created", "model", "system_fingerprint", "service_tier")
# Message fields with dedicated handling; any other message field rides on the role delta.
_CHAT_MESSAGE_FIELDS = frozenset({"role", "content", "refusal", "tool_calls"})
# What one merged answer may open, whatever an upstream streams: choices (OpenAI's ``n``
# goes to 128), tool calls per choice, other message fields per choice. Past them the
# stream has no OpenAI shape: what it would make the gateway hold stays bounded.
MAX_CHOICES = 128
MAX_TOOL_CALLS = 1024
MAX_EXTRA_FIELDS = 64


def chunks_to_body(chunks: Iterable[bytes], endpoint: str) -> bytes:
    """Merges streamed chunk payloads into the equivalent non-streamed response body."""
    merge = BodyMerge(endpoint)
    for raw in chunks:
        try:
            chunk = orjson.loads(raw)
        except TypeError as exc:  # not bytes or str at all
            raise ValueError("stream chunk does not have the OpenAI shape") from exc
        merge.add(chunk)
    return merge.body()


class BodyMerge:
    """``chunks_to_body`` one parsed chunk at a time, for a stream assembled as it arrives."""

    __slots__ = ("_choices", "_endpoint", "_head", "_missing", "_usage")

    def __init__(self, endpoint: str) -> None:
        _check_endpoint(endpoint)
        self._endpoint = endpoint
        self._head: dict[str, Any] = {}
        # Head fields not seen yet, the only ones a chunk is searched for: a field no chunk
        # has (service_tier, from most upstreams) costs one lookup a chunk, not five.
        self._missing: tuple[str, ...] = _HEAD_FIELDS
        self._choices: dict[int, _ChoiceMerge] = {}
        self._usage: Any = None

    def add(self, chunk: Any) -> None:
        """One parsed chunk; raises ``ValueError`` for one without the OpenAI shape."""
        try:
            for name in self._missing:
                value = chunk.get(name)
                if value is not None:  # the first value a field has is the body's
                    self._head[name] = value
                    self._missing = tuple([other for other in self._missing if other != name])
            usage = chunk.get("usage")
            if usage is not None:
                self._usage = usage
            choices = self._choices
            for choice in chunk.get("choices") or ():
                index = choice.get("index", 0)
                merge = choices.get(index)
                if merge is None:
                    if len(choices) >= MAX_CHOICES:
                        raise ValueError("stream opens more choices than any request asks")
                    merge = choices[index] = _ChoiceMerge()
                merge.add(choice)
        except (AttributeError, TypeError) as exc:
            raise ValueError("stream chunk does not have the OpenAI shape") from exc

    def body(self) -> bytes:
        """The non-streamed response body of every chunk added so far."""
        head, choices = self._head, self._choices
        is_chat = self._endpoint == CHAT
        body: dict[str, Any] = {
            "id": head.get("id"),
            "object": "chat.completion" if is_chat else "text_completion",
            "created": head.get("created"),
            "model": head.get("model"),
        }
        for name in ("system_fingerprint", "service_tier"):
            if name in head:
                body[name] = head[name]
        try:
            body["choices"] = [
                choices[index].to_chat(index) if is_chat else choices[index].to_completion(index)
                for index in sorted(choices)
            ]
        except TypeError as exc:  # text that is not a string, indexes that do not sort
            raise ValueError("stream chunks do not have the OpenAI shape") from exc
        if self._usage is not None:
            body["usage"] = self._usage
        return orjson.dumps(body)


class _Items(list[bytes]):
    """The items of a list field that arrived in pieces (logprobs), each piece as JSON."""

    __slots__ = ()


class _Text(list[str]):
    """A string field that arrived in pieces: joined once, when the body is built (joining
    at every piece copies what came before each time, quadratic in the pieces)."""

    __slots__ = ()


def _joined(previous: str | _Text, piece: str) -> _Text:
    if isinstance(previous, _Text):
        previous.append(piece)
        return previous
    return _Text((previous, piece))


def _finished(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (of a message or a tool call, one level of nested objects) with every
    string that arrived in pieces joined."""
    done: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, _Text):
            value = "".join(value)
        elif isinstance(value, dict) and any(isinstance(v, _Text) for v in value.values()):
            value = {k: "".join(v) if isinstance(v, _Text) else v for k, v in value.items()}
        done[name] = value
    return done


class _ChoiceMerge:
    """Accumulates the deltas of one choice index."""

    __slots__ = ("extra", "finish_reason", "logprobs", "parts", "refusal", "role", "tool_calls")

    def __init__(self) -> None:
        self.role: str | None = None
        self.parts: list[str] | None = None  # chat content or completion text
        self.refusal: list[str] | None = None
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.logprobs: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}

    def add(self, choice: dict[str, Any]) -> None:
        text = choice.get("text")
        if text is not None:
            self._append_text(text)
        delta = choice.get("delta")
        if delta:
            self._add_delta(delta)
        logprobs = choice.get("logprobs")
        if logprobs is not None:
            self._add_logprobs(logprobs)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]

    def _append_text(self, text: str) -> None:
        if self.parts is None:
            self.parts = [text]
        else:
            self.parts.append(text)

    def _add_delta(self, delta: dict[str, Any]) -> None:
        for name, value in delta.items():
            if value is None:
                continue
            if name == "content":  # nearly every chunk's one field: appended here, no call
                if self.parts is None:
                    self.parts = [value]
                else:
                    self.parts.append(value)
            elif name == "role":
                self.role = value
            elif name == "refusal":
                if self.refusal is None:
                    self.refusal = [value]
                else:
                    self.refusal.append(value)
            elif name == "tool_calls":
                for call_delta in value:
                    self._add_tool_call(call_delta)
            elif isinstance(value, str) and isinstance(self.extra.get(name), str | _Text):
                self.extra[name] = _joined(self.extra[name], value)
            else:
                if name not in self.extra and len(self.extra) >= MAX_EXTRA_FIELDS:
                    raise ValueError("stream chunk delta has too many fields")
                self.extra[name] = value

    def _add_tool_call(self, call_delta: dict[str, Any]) -> None:
        index = call_delta.get("index", len(self.tool_calls))
        call = self.tool_calls.get(index)
        if call is None:
            if len(self.tool_calls) >= MAX_TOOL_CALLS:
                raise ValueError("stream chunk opens too many tool calls")
            call = self.tool_calls[index] = {}
        for name, value in call_delta.items():
            if name == "index" or value is None:
                continue
            if isinstance(value, dict):
                # Nested string fields (function name, arguments) arrive in pieces.
                nested = call.setdefault(name, {})
                for field_name, piece in value.items():
                    previous = nested.get(field_name)
                    if isinstance(piece, str) and isinstance(previous, str | _Text):
                        nested[field_name] = _joined(previous, piece)
                    elif piece is not None or field_name not in nested:
                        nested[field_name] = piece
            else:
                call[name] = value

    def _add_logprobs(self, logprobs: dict[str, Any]) -> None:
        if self.logprobs is None:
            self.logprobs = {}
        for name, value in logprobs.items():
            previous = self.logprobs.get(name)
            if isinstance(value, list):
                # Kept as the JSON of its items, not as objects: a token's logprob and its
                # alternatives parsed take ~5x their bytes, for as many tokens as the answer.
                items = orjson.dumps(value)[1:-1]
                if isinstance(previous, _Items):
                    if items:
                        previous.append(items)
                else:
                    self.logprobs[name] = _Items([items] if items else [])
            elif value is not None or name not in self.logprobs:
                self.logprobs[name] = value

    def _logprobs(self) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        return {
            name: orjson.Fragment(b"[" + b",".join(value) + b"]")
            if isinstance(value, _Items)
            else value
            for name, value in self.logprobs.items()
        }

    def to_chat(self, index: int) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": self.role or "assistant",
            "content": None if self.parts is None else "".join(self.parts),
            "refusal": None if self.refusal is None else "".join(self.refusal),
        }
        if self.tool_calls:
            message["tool_calls"] = [_finished(self.tool_calls[i]) for i in sorted(self.tool_calls)]
        message.update(_finished(self.extra))
        return {
            "index": index,
            "message": message,
            "logprobs": self._logprobs(),
            "finish_reason": self.finish_reason,
        }

    def to_completion(self, index: int) -> dict[str, Any]:
        return {
            "text": "" if self.parts is None else "".join(self.parts),
            "index": index,
            "logprobs": self._logprobs(),
            "finish_reason": self.finish_reason,
        }


def body_to_chunks(body: bytes, endpoint: str) -> list[bytes]:
    """Splits a response body into OpenAI-style chunk payloads.

    Per choice: the opening delta, the content, each tool call, then ``finish_reason``. When
    the body has ``usage``, the last chunk is a usage chunk with empty ``choices``
    (see :func:`is_usage_chunk`) that :func:`sse_frames` drops unless usage was asked for.
    """
    _check_endpoint(endpoint)
    parsed = orjson.loads(body)
    if not isinstance(parsed, dict):
        raise ValueError("response body is not a JSON object")
    is_chat = endpoint == CHAT
    head: dict[str, Any] = {
        "id": parsed.get("id"),
        "object": "chat.completion.chunk" if is_chat else "text_completion",
        "created": parsed.get("created"),
        "model": parsed.get("model"),
    }
    for name in ("system_fingerprint", "service_tier"):
        if parsed.get(name) is not None:
            head[name] = parsed[name]
    # Serialize the shared head once; every chunk is head + its own "choices".
    prefix = orjson.dumps(head)[:-1] + b',"choices":'
    chunks: list[bytes] = []
    try:
        for choice in parsed.get("choices") or ():
            deltas = _chat_choice_chunks(choice) if is_chat else _completion_choice_chunks(choice)
            chunks.extend(prefix + orjson.dumps([delta]) + b"}" for delta in deltas)
    except (AttributeError, TypeError) as exc:
        raise ValueError("response body does not have the OpenAI shape") from exc
    if parsed.get("usage") is not None:
        chunks.append(prefix + b'[],"usage":' + orjson.dumps(parsed["usage"]) + b"}")
    elif not chunks:
        chunks.append(prefix + b"[]}")  # still tell the client which response this is
    return chunks


def _chat_choice_chunks(choice: dict[str, Any]) -> list[dict[str, Any]]:
    index = choice.get("index", 0)
    message = choice.get("message") or {}
    content = message.get("content")
    refusal = message.get("refusal")
    logprobs = choice.get("logprobs")
    opening: dict[str, Any] = {
        "role": message.get("role") or "assistant",
        "content": None if content is None else "",
        "refusal": None,
    }
    opening.update((k, v) for k, v in message.items() if k not in _CHAT_MESSAGE_FIELDS)
    deltas = [{"index": index, "delta": opening, "logprobs": None, "finish_reason": None}]
    if content or refusal is not None or logprobs is not None:
        body_delta: dict[str, Any] = {}
        if content:
            body_delta["content"] = content
        if refusal is not None:
            body_delta["refusal"] = refusal
        deltas.append(
            {"index": index, "delta": body_delta, "logprobs": logprobs, "finish_reason": None}
        )
    for call_index, call in enumerate(message.get("tool_calls") or ()):
        call_delta = {"index": call_index, **call}
        deltas.append(
            {
                "index": index,
                "delta": {"tool_calls": [call_delta]},
                "logprobs": None,
                "finish_reason": None,
            }
        )
    deltas.append(
        {
            "index": index,
            "delta": {},
            "logprobs": None,
            "finish_reason": choice.get("finish_reason"),
        }
    )
    return deltas


def _completion_choice_chunks(choice: dict[str, Any]) -> list[dict[str, Any]]:
    index = choice.get("index", 0)
    return [
        {
            "text": choice.get("text") or "",
            "index": index,
            "logprobs": choice.get("logprobs"),
            "finish_reason": None,
        },
        {
            "text": "",
            "index": index,
            "logprobs": None,
            "finish_reason": choice.get("finish_reason"),
        },
    ]


def sse_frames(chunks: Sequence[bytes], include_usage: bool) -> list[bytes]:
    """``data: ...`` frames ending with ``[DONE]``; the trailing usage chunk only on request."""
    frames = [b"data: " + _lines(chunk) + b"\n\n" for chunk in _replayed(chunks, include_usage)]
    frames.append(_DONE_FRAME)
    return frames


def sse_stream(chunks: Sequence[bytes], include_usage: bool) -> bytes:
    """``sse_frames`` joined, built in one pass (an instant replay sends them as one)."""
    replayed = _replayed(chunks, include_usage)
    if not replayed:
        return _DONE_FRAME
    # A payload of several lines is rare; looking for one costs a join and a memchr
    # (0.5 µs for 20 events), where counting the separators' newlines cost 2 µs.
    is_multi_line = b"\n" in b"".join(replayed)
    joined = b"\n\ndata: ".join(map(_lines, replayed) if is_multi_line else replayed)
    return b"".join((b"data: ", joined, b"\n\n", _DONE_FRAME))


def _lines(payload: bytes) -> bytes:
    """A payload's lines each on a ``data:`` line of their own: an event's data may span
    lines (SSE joins them with \\n), and one ``data:`` line cannot hold them."""
    return payload.replace(b"\n", b"\ndata: ") if b"\n" in payload else payload


def _replayed(chunks: Sequence[bytes], include_usage: bool) -> Sequence[bytes]:
    if not include_usage and chunks and is_usage_chunk(chunks[-1]):
        return chunks[:-1]
    return chunks


def _check_endpoint(endpoint: str) -> None:
    if endpoint not in (CHAT, COMPLETIONS):
        raise ValueError(f"unknown endpoint {endpoint!r}")


# --- requests --------------------------------------------------------------------------

_NUMBER = (int, float)
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1
# Transport-only fields: they change how the answer is delivered, never what it says.
_UNKEYED_FIELDS = frozenset({"stream", "stream_options", "user"})
_INCLUDE_USAGE = {"include_usage": True}


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    """An integer parameter hasten reads (n, max_tokens, seed): one of 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and _MIN_INT <= value <= _MAX_INT


def _is_beyond_64_bits(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and not _is_int(value)


def _require(body: dict[str, Any], param: str, check: Callable[[Any], bool], what: str) -> None:
    if param not in body:
        raise InvalidRequest(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    if not check(body[param]):
        raise _invalid(param, what, body[param])


def _optional(body: dict[str, Any], param: str, check: Callable[[Any], bool], what: str) -> None:
    value = body.get(param)
    if value is not None and not check(value):
        raise _invalid(param, what, value)


def _invalid(param: str, what: str, value: Any) -> InvalidRequest:
    if what.startswith("an integer") and _is_beyond_64_bits(value):
        return InvalidRequest(
            f"Invalid '{param}': the integer is out of range; it must fit in 64 bits "
            f"({_MIN_INT} to {_MAX_INT}).",
            param=param,
            code="integer_out_of_range",
        )
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidRequest(
        f"Invalid type for '{param}': expected {what}, got {shown}.",
        param=param,
        code="invalid_type",
    )


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _check_messages(messages: list[Any]) -> None:
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _invalid(param, "an object", message)
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidRequest(
                f"Missing or invalid '{param}.role'.", param=f"{param}.role", code="invalid_type"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _invalid(f"{param}.content", "a string, an array or null", content)


def _check_sampling(body: dict[str, Any]) -> None:
    _optional(body, "stream", lambda v: isinstance(v, bool), "a boolean")
    _optional(body, "temperature", _is_number, "a number")
    _optional(body, "top_p", _is_number, "a number")
    _optional(body, "n", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "max_tokens", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "max_completion_tokens", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
    _optional(body, "seed", _is_int, "an integer")
    _optional(body, "stream_options", lambda v: isinstance(v, dict), "an object")
    _optional(body, "stop", lambda v: isinstance(v, str | list), "a string or an array")


def check_chat(body: dict[str, Any]) -> None:
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    _require(body, "messages", _is_message_list, "a non-empty array")
    _check_messages(body["messages"])
    _optional(body, "tools", lambda v: isinstance(v, list), "an array")
    _check_sampling(body)


def check_completion(body: dict[str, Any]) -> None:
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    _require(body, "prompt", lambda v: isinstance(v, str | list), "a string or an array")
    _check_sampling(body)


def check_model_field(body: dict[str, Any]) -> None:
    """The one field every API's request names: its model."""
    _require(body, "model", lambda v: isinstance(v, str) and v != "", "a non-empty string")


def require(body: dict[str, Any], param: str, check: Callable[[Any], bool], what: str) -> None:
    """Raises OpenAI's 400 unless ``body[param]`` is there and passes ``check``."""
    _require(body, param, check, what)


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    """The most output tokens a chat or completions request names (``max_completion_tokens``
    first: OpenAI's newer name wins when both are there)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and _is_int(value) and value >= 1:
            return value
    return None


# --- stream events ---------------------------------------------------------------------

STREAM_ERROR_CODE = "upstream_stream_error"
_TOKEN_DELTA_KEYS = ("content", "refusal", "tool_calls", "function_call", "reasoning_content")


def is_output(event: Any) -> bool:
    """The first token: a chunk with text, a delta with content, a refusal, a tool call or
    reasoning, or a finish_reason (an empty answer is an answer too)."""
    choices = event.get("choices") if isinstance(event, dict) else None
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text") or choice.get("finish_reason") is not None:
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(key) for key in _TOKEN_DELTA_KEYS):
            return True
    return False


def event_error(event: Any) -> UpstreamError | None:
    """The error an upstream's ``{"error": ...}`` event stands for; None for any other."""
    error = event.get("error") if isinstance(event, dict) else None
    if error is None:
        return None
    message, code = str(error), STREAM_ERROR_CODE
    if isinstance(error, Mapping):
        message = str(error.get("message") or "upstream error")
        if isinstance(error.get("code"), str) and error["code"]:
            code = error["code"]
    return UpstreamError(f"upstream error mid-stream: {message}", code=code)


class ChoicesEnding:
    """Whether a chat or completions stream ended properly: ``[DONE]`` once, after every
    other event, no event an error or anything but a JSON object, and every choice it
    opened given a ``finish_reason`` (a stream cut short can still end with ``[DONE]``)."""

    __slots__ = ("_finished", "_is_done", "_opened", "is_broken")

    def __init__(self) -> None:
        self._opened: set[Any] = set()  # choice indexes seen
        self._finished: set[Any] = set()  # those that had a finish_reason
        self._is_done = False
        self.is_broken = False  # something no whole answer has

    def event(self, parsed: Any) -> None:
        if self._is_done or not isinstance(parsed, dict) or "error" in parsed:
            self.is_broken = True  # after [DONE], not a JSON object, or an error
            return
        choices = parsed.get("choices")
        if not choices:
            return
        if not isinstance(choices, list):
            self.is_broken = True
            return
        opened = self._opened
        try:
            for choice in choices:
                index = choice.get("index", 0)
                if index not in opened:
                    opened.add(index)
                    # Past this many choices the stream is not whole (the merge refuses it
                    # too), and the record of which choices finished stays bounded
                    # whatever an upstream sends.
                    if len(opened) > MAX_CHOICES:
                        self.is_broken = True
                        opened.clear()
                        self._finished.clear()
                        return
                if choice.get("finish_reason") is not None:
                    self._finished.add(index)
        except (AttributeError, TypeError):  # not an object, an unhashable index
            self.is_broken = True

    def done(self) -> None:
        if self._is_done:
            self.is_broken = True  # a second [DONE]
        self._is_done = True

    @property
    def is_ended(self) -> bool:
        return self._is_done and not self.is_broken

    @property
    def is_finished(self) -> bool:
        return bool(self._opened) and self._opened <= self._finished

    def is_whole(self, has_pending: bool) -> bool:
        return not has_pending and not self.is_broken and self._is_done and self.is_finished


# --- the two APIs ----------------------------------------------------------------------


_CHOICES_FIELDS = ParamFields(("max_tokens", "max_completion_tokens"), "stop", "n")


class _ChoicesApi:
    """Chat Completions or Completions: the same stream of choices, two shapes of them."""

    __slots__ = ("_check", "_items", "name", "path")

    is_streamable = True
    is_generating = True
    has_done = True
    param_fields = _CHOICES_FIELDS

    def __init__(
        self, name: str, path: str, check: Callable[[dict[str, Any]], None], items: str
    ) -> None:
        self.name, self.path, self._check, self._items = name, path, check, items

    @property
    def items_param(self) -> str:
        """The body's list a request may hold only so many of ([server] max_messages)."""
        return self._items

    def check(self, body: dict[str, Any]) -> None:
        self._check(body)

    def is_stream(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def wants_usage(self, body: Mapping[str, Any]) -> bool:
        options = body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def can_add_usage(self) -> bool:
        return True

    def as_stream(self, body: dict[str, Any], *, with_usage: bool) -> dict[str, Any]:
        body["stream"] = True
        if with_usage:
            options = body.get("stream_options")
            body["stream_options"] = (
                {**options, **_INCLUDE_USAGE} if isinstance(options, dict) else dict(_INCLUDE_USAGE)
            )
        return body

    def key_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in body.items() if name not in _UNKEYED_FIELDS}

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return max_output_tokens(body)

    def chat_view(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return body if self.name == CHAT else None

    def affinity_view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return body  # its messages or prompt as they are

    # Asked of every event of a stream: the module's functions themselves, no frame between.
    is_output = staticmethod(is_output)
    event_error = staticmethod(event_error)

    def ending(self) -> ChoicesEnding:
        return ChoicesEnding()

    def merge(self) -> BodyMerge:
        return BodyMerge(self.name)

    def split(self, body: bytes) -> list[bytes]:
        return body_to_chunks(body, self.name)

    def frames(self, payloads: Sequence[bytes], *, include_usage: bool) -> list[bytes]:
        return sse_frames(payloads, include_usage)

    def stream(self, payloads: Sequence[bytes], *, include_usage: bool) -> bytes:
        return sse_stream(payloads, include_usage)

    def fresh_payloads(self, payloads: Sequence[bytes]) -> Sequence[bytes]:
        return payloads  # a chat completion's id names nothing a client comes back for

    def fresh_body(self, body: bytes) -> bytes:
        return body

    def failure_event(self, error: HastenError, sent: bytes = b"") -> bytes:
        return sse_event(error.to_json())

    def render_error(self, error: HastenError) -> bytes:
        return error.to_json()


CHAT_API = _ChoicesApi(CHAT, "/chat/completions", check_chat, "messages")
COMPLETIONS_API = _ChoicesApi(COMPLETIONS, "/completions", check_completion, "prompt")

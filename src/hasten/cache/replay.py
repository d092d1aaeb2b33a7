"""Serve a cached answer either way: merge stream chunks into a body, split a body into chunks.

Pure functions on OpenAI wire shapes. ``endpoint`` is ``"chat"`` (chat.completion[.chunk]) or
``"completions"`` (text_completion). Malformed input raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from hasten.cache.entry import CachedAnswer
from hasten.values.usage import is_usage_chunk

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

    __slots__ = ("_choices", "_endpoint", "_head", "_num_missing", "_usage")

    def __init__(self, endpoint: str) -> None:
        _check_endpoint(endpoint)
        self._endpoint = endpoint
        self._head: dict[str, Any] = {}
        self._num_missing = len(_HEAD_FIELDS)  # head fields not seen yet: 0 skips the scan
        self._choices: dict[int, _ChoiceMerge] = {}
        self._usage: Any = None

    def add(self, chunk: Any) -> None:
        """One parsed chunk; raises ``ValueError`` for one without the OpenAI shape."""
        try:
            if self._num_missing:
                head = self._head
                for name in _HEAD_FIELDS:
                    if head.get(name) is None and chunk.get(name) is not None:
                        head[name] = chunk[name]
                        self._num_missing -= 1
            if chunk.get("usage") is not None:
                self._usage = chunk["usage"]
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
            if name == "content":
                self._append_text(value)
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


def answer_body(answer: CachedAnswer) -> bytes:
    """The answer as a non-streamed response body, whatever form it was stored in."""
    if answer.body is not None:
        return answer.body
    assert answer.chunks is not None
    return chunks_to_body(answer.chunks, answer.endpoint)


def answer_frames(answer: CachedAnswer, *, include_usage: bool) -> list[bytes]:
    """The answer as SSE frames, whatever form it was stored in."""
    return sse_frames(_stream_chunks(answer), include_usage)


def answer_stream(answer: CachedAnswer, *, include_usage: bool) -> bytes:
    """``answer_frames`` as one byte string."""
    return sse_stream(_stream_chunks(answer), include_usage)


def _stream_chunks(answer: CachedAnswer) -> Sequence[bytes]:
    if answer.chunks is not None:
        return answer.chunks
    assert answer.body is not None
    return body_to_chunks(answer.body, answer.endpoint)


def _check_endpoint(endpoint: str) -> None:
    if endpoint not in (CHAT, COMPLETIONS):
        raise ValueError(f"unknown endpoint {endpoint!r}")

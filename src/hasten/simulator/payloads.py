"""OpenAI response shapes: whole JSON bodies and SSE chunks, encoded to bytes.

Content chunks are the hot path of a stream, so they are spliced from a per-response prefix
instead of serialising a fresh dict per token; the rest goes through orjson dicts.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Protocol

import orjson

from hasten.errors import HastenError, RateLimited
from hasten.simulator.generation import GeneratedChoice, TokenLogprob, ToolCall
from hasten.wire.asgi import sse_event

SYSTEM_FINGERPRINT = "fp_hasten_sim"
OWNED_BY = "hasten-simulator"
RATE_LIMITED_MESSAGE = "Rate limit reached (simulated)."


def usage_dict(
    num_prompt_tokens: int, num_completion_tokens: int, num_cached_tokens: int
) -> dict[str, object]:
    return {
        "prompt_tokens": num_prompt_tokens,
        "completion_tokens": num_completion_tokens,
        "total_tokens": num_prompt_tokens + num_completion_tokens,
        "prompt_tokens_details": {"cached_tokens": num_cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_token(piece: str, entry: TokenLogprob) -> dict[str, object]:
    logprob, top = entry
    return {
        "token": piece,
        "logprob": logprob,
        "bytes": list(piece.encode()),
        "top_logprobs": [
            {"token": token, "logprob": value, "bytes": list(token.encode())}
            for token, value in top
        ],
    }


def chat_logprobs(pieces: Sequence[str], entries: Sequence[TokenLogprob]) -> dict[str, object]:
    """A chat choice's ``logprobs``: one entry per content token (stream: per chunk)."""
    content = [_chat_token(piece, entry) for piece, entry in zip(pieces, entries, strict=True)]
    return {"content": content, "refusal": None}


def completion_logprobs(
    pieces: Sequence[str], entries: Sequence[TokenLogprob], first_offset: int
) -> dict[str, object]:
    """A text completion's legacy ``logprobs``; offsets count from the completion's start."""
    offsets: list[int] = []
    offset = first_offset
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece)
    return {
        "tokens": list(pieces),
        "token_logprobs": [entry[0] for entry in entries],
        "top_logprobs": [dict(entry[1]) for entry in entries],
        "text_offset": offsets,
    }


def _tool_call(call: ToolCall, arguments: str) -> dict[str, object]:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _json_event(payload: object) -> bytes:
    return sse_event(orjson.dumps(payload))


def error_event(error: HastenError) -> bytes:
    """A mid-stream error as OpenAI sends it: an SSE event carrying the error object."""
    return sse_event(error.to_json())


def rate_limit_error(retry_after_s: float) -> RateLimited:
    """A 429 with OpenAI's retry headers: ``retry-after`` in seconds as given (fractions
    too, unlike the gateway's whole seconds) and ``retry-after-ms``."""
    error = RateLimited(RATE_LIMITED_MESSAGE)
    error.headers["retry-after"] = f"{retry_after_s:g}"
    error.headers["retry-after-ms"] = str(round(retry_after_s * 1000))
    return error


class StreamEncoder(Protocol):
    def role(self, index: int, is_tool_call: bool = False) -> bytes: ...
    def content(self, index: int, piece: str) -> bytes: ...
    def content_logprobs(
        self, index: int, piece: str, entry: TokenLogprob, offset: int
    ) -> bytes: ...
    def tool_call(self, index: int, call_index: int, call: ToolCall) -> bytes: ...
    def tool_arguments(self, index: int, call_index: int, piece: str) -> bytes: ...
    def finish(self, index: int, reason: str) -> bytes: ...
    def usage(self, usage: dict[str, object]) -> bytes: ...


def _envelope(completion_id: str, obj: str, created: int, model: str) -> dict[str, object]:
    return {"id": completion_id, "object": obj, "created": created, "model": model}


class _SplicingEncoder:
    """Shared machinery: an envelope per response, content chunks spliced from bytes.

    A content chunk is `heads[index] + json(piece) + tails[index]`, precomputed per choice.
    """

    def __init__(
        self, obj: str, completion_id: str, created: int, model: str, include_usage: bool
    ) -> None:
        self._base = _envelope(completion_id, obj, created, model)
        self._base["system_fingerprint"] = SYSTEM_FINGERPRINT
        self._include_usage = include_usage
        # The envelope without its closing brace, so choices can be spliced in after it.
        self._prefix = b"data: " + orjson.dumps(self._base)[:-1] + b',"choices":[{'
        self._end = b',"usage":null}\n\n' if include_usage else b"}\n\n"
        self._heads: list[bytes] = []
        self._tails: list[bytes] = []

    def _chunk(self, choice: dict[str, object]) -> bytes:
        payload = {**self._base, "choices": [choice]}
        if self._include_usage:
            payload["usage"] = None
        return _json_event(payload)

    def content(self, index: int, piece: str) -> bytes:
        return self._heads[index] + orjson.dumps(piece) + self._tails[index]

    def usage(self, usage: dict[str, object]) -> bytes:
        return _json_event({**self._base, "choices": [], "usage": usage})


class ChatStreamEncoder(_SplicingEncoder):
    """`chat.completion.chunk` events; with include_usage every chunk carries `usage: null`."""

    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool,
        num_choices: int,
    ) -> None:
        super().__init__("chat.completion.chunk", completion_id, created, model, include_usage)
        self._heads = [
            self._prefix + b'"index":%d,"delta":{"content":' % index for index in range(num_choices)
        ]
        tail = b'},"logprobs":null,"finish_reason":null}]' + self._end
        self._tails = [tail] * num_choices

    def role(self, index: int, is_tool_call: bool = False) -> bytes:
        delta: dict[str, object] = {
            "role": "assistant",
            "content": None if is_tool_call else "",
            "refusal": None,
        }
        return self._delta(index, delta)

    def _delta(self, index: int, delta: dict[str, object], logprobs: object = None) -> bytes:
        return self._chunk(
            {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
        )

    def content_logprobs(self, index: int, piece: str, entry: TokenLogprob, offset: int) -> bytes:
        return self._delta(index, {"content": piece}, chat_logprobs((piece,), (entry,)))

    def tool_call(self, index: int, call_index: int, call: ToolCall) -> bytes:
        opening = {"index": call_index, **_tool_call(call, "")}
        return self._delta(index, {"tool_calls": [opening]})

    def tool_arguments(self, index: int, call_index: int, piece: str) -> bytes:
        call = {"index": call_index, "function": {"arguments": piece}}
        return self._delta(index, {"tool_calls": [call]})

    def finish(self, index: int, reason: str) -> bytes:
        return self._chunk({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})


class CompletionStreamEncoder(_SplicingEncoder):
    """Legacy `text_completion` stream events; there is no role chunk."""

    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool,
        num_choices: int,
    ) -> None:
        super().__init__("text_completion", completion_id, created, model, include_usage)
        self._heads = [self._prefix + b'"text":'] * num_choices
        self._tails = [
            b',"index":%d,"logprobs":null,"finish_reason":null}]' % index + self._end
            for index in range(num_choices)
        ]

    def role(self, index: int, is_tool_call: bool = False) -> bytes:
        return b""

    def content_logprobs(self, index: int, piece: str, entry: TokenLogprob, offset: int) -> bytes:
        logprobs = completion_logprobs((piece,), (entry,), offset)
        return self._chunk(
            {"text": piece, "index": index, "logprobs": logprobs, "finish_reason": None}
        )

    def tool_call(self, index: int, call_index: int, call: ToolCall) -> bytes:
        return b""  # text completions have no tools

    def tool_arguments(self, index: int, call_index: int, piece: str) -> bytes:
        return b""

    def finish(self, index: int, reason: str) -> bytes:
        return self._chunk({"text": "", "index": index, "logprobs": None, "finish_reason": reason})


def chat_completion_body(
    completion_id: str,
    created: int,
    model: str,
    choices: Sequence[GeneratedChoice],
    usage: dict[str, object],
) -> bytes:
    payload = _envelope(completion_id, "chat.completion", created, model)
    payload["system_fingerprint"] = SYSTEM_FINGERPRINT
    payload["choices"] = [
        {
            "index": index,
            "message": _chat_message(choice),
            "logprobs": None
            if choice.logprobs is None
            else chat_logprobs(choice.pieces, choice.logprobs),
            "finish_reason": choice.finish_reason,
        }
        for index, choice in enumerate(choices)
    ]
    payload["usage"] = usage
    return orjson.dumps(payload)


def _chat_message(choice: GeneratedChoice) -> dict[str, object]:
    if not choice.tool_calls:
        return {"role": "assistant", "content": choice.text, "refusal": None}
    calls = [
        _tool_call(call, "".join(pieces))
        for call, pieces in zip(choice.tool_calls, choice.call_pieces(), strict=True)
    ]
    return {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}


def text_completion_body(
    completion_id: str,
    created: int,
    model: str,
    choices: Sequence[GeneratedChoice],
    usage: dict[str, object],
) -> bytes:
    payload = _envelope(completion_id, "text_completion", created, model)
    payload["system_fingerprint"] = SYSTEM_FINGERPRINT
    payload["choices"] = [
        {
            "text": choice.text,
            "index": index,
            "logprobs": None
            if choice.logprobs is None
            else completion_logprobs(choice.pieces, choice.logprobs, 0),
            "finish_reason": choice.finish_reason,
        }
        for index, choice in enumerate(choices)
    ]
    payload["usage"] = usage
    return orjson.dumps(payload)


def _encode_vector(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        # Little-endian float32, which is what the openai SDK decodes by default.
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def embeddings_body(
    model: str, vectors: Sequence[list[float]], encoding_format: str, num_tokens: int
) -> bytes:
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": index,
                    "embedding": _encode_vector(vector, encoding_format),
                }
                for index, vector in enumerate(vectors)
            ],
            "model": model,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        }
    )


def model_dict(model: str) -> dict[str, object]:
    return {"id": model, "object": "model", "created": 0, "owned_by": OWNED_BY}


def models_body(models: Sequence[str]) -> bytes:
    return orjson.dumps({"object": "list", "data": [model_dict(model) for model in models]})

"""OpenAI chat-completions wire format for the local engine: request parsing, response shapes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hasten.errors import InvalidRequest
from hasten.local.sampling import SamplingParams

if TYPE_CHECKING:
    from hasten.local.engine import Usage

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP_SEQUENCES = 4
MAX_TEMPERATURE = 2.0


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    sampling: SamplingParams
    is_stream: bool
    includes_usage: bool


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' must be a non-empty string", param="model")
    if body.get("n", 1) != 1:
        raise InvalidRequest("only n=1 is supported", param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object", param="stream_options")
    return ChatRequest(
        model=model,
        messages=_messages(body.get("messages")),
        sampling=_sampling(body),
        is_stream=stream,
        includes_usage=options.get("include_usage") is True,
    )


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    messages = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where} must be an object", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"{where}.role must be one of {', '.join(ROLES)}", param=where)
        messages.append(
            {
                "role": "system" if role == "developer" else role,
                "content": _content(message.get("content"), where),
            }
        )
    return messages


def _content(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise InvalidRequest(f"{where}.content: only text parts are supported", param=where)
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise InvalidRequest(f"{where}.content must be a string or an array of parts", param=where)


def _sampling(body: Mapping[str, Any]) -> SamplingParams:
    temperature = _number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0.0:
        raise InvalidRequest("'top_p' must be greater than 0", param="top_p")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise InvalidRequest("'max_tokens' must be a positive integer", param="max_tokens")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise InvalidRequest("'seed' must be an integer", param="seed")
    return SamplingParams(temperature, top_p, max_tokens, _stop(body.get("stop")), seed)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_SEQUENCES
        or not all(isinstance(stop, str) for stop in stops)
    ):
        raise InvalidRequest(
            f"'stop' must be a string or up to {MAX_STOP_SEQUENCES} strings", param="stop"
        )
    return tuple(stop for stop in stops if stop)


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be a number from {low} to {high}", param=name)
    return float(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def completion_body(
    response_id: str, model: str, text: str, finish_reason: str, usage: Usage
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_dict(usage),
    }


def chunk_body(
    response_id: str,
    model: str,
    delta: dict[str, str],
    finish_reason: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk_body(response_id: str, model: str, usage: Usage, created: int) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_dict(usage),
    }


def models_body(model: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_body(model, created)]}


def model_body(model: str, created: int) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": created, "owned_by": "hasten"}

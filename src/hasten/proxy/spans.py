"""What the request's spans say: request and answer attributes (an upstream attempt's are
``hasten.upstream.spans``).

Names follow OpenTelemetry's GenAI and HTTP semantic conventions where one exists
(``gen_ai.request.model``, ``http.response.status_code``); the gateway's own facts are
``hasten.*``. Every function here returns at once when the stage is not recording, so
nothing is parsed or formatted for a trace nobody keeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson

from hasten.cache import CachedAnswer
from hasten.values.stage import Stage
from hasten.wire.sse import SSEDecoder

# The OpenAI endpoint's name (hasten.proxy.validation) -> gen_ai.operation.name.
OPERATIONS = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings"}
_REQUEST_NUMBERS = (
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
)
# A stream's usage and model arrive in its last events: only this many chunks are read.
_TAIL_CHUNKS = 4


def operation(endpoint: str) -> str:
    return OPERATIONS.get(endpoint, endpoint)


def describe_request(stage: Stage, endpoint: str, body: Mapping[str, Any]) -> None:
    """Names the root span ``{operation} {model}`` and sets the request's GenAI attributes."""
    if not stage.is_recording:
        return
    model = str(body.get("model", ""))
    stage.rename(f"{operation(endpoint)} {model}")
    stage.set("gen_ai.request.model", model)
    for key, name in _REQUEST_NUMBERS:
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            stage.set(name, value)
    if body.get("stream") is True:
        stage.set("hasten.stream", True)


def describe_answer(
    stage: Stage, status: int, answer: bytes | Sequence[bytes], is_stream: bool
) -> None:
    """The response's status, model and token usage, from what the client got: a whole
    body, or a stream's chunks (of which only the last few are read)."""
    if not stage.is_recording:
        return
    stage.set("http.response.status_code", status)
    if status >= 500:
        stage.fail(f"HTTP {status}", error_type=str(status))
    if status != 200 or not answer:
        return
    if isinstance(answer, bytes):
        payloads = [answer]
    elif is_stream:
        payloads = SSEDecoder().feed(b"".join(answer[-_TAIL_CHUNKS:]))
    else:
        payloads = [b"".join(answer)]
    _usage_from(stage, payloads)


async def keep_tail(chunks: AsyncIterator[bytes], tail: list[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` as they come, keeping the last few in ``tail`` for ``describe_answer``
    (only for a recorded stream nobody else keeps: a direct, uncached one)."""
    async for chunk in chunks:
        tail.append(chunk)
        if len(tail) > _TAIL_CHUNKS:
            del tail[0]
        yield chunk


def describe_cached(stage: Stage, entry: CachedAnswer) -> None:
    """The model and usage of a stored answer being replayed."""
    if not stage.is_recording:
        return
    stage.set("http.response.status_code", 200)
    if entry.body is not None:
        _usage_from(stage, [entry.body])
    elif entry.chunks:
        _usage_from(stage, entry.chunks[-_TAIL_CHUNKS:])


def _usage_from(stage: Stage, payloads: Sequence[bytes]) -> None:
    for payload in reversed(payloads):
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue  # [DONE], or an event cut at the start of the tail
        if not isinstance(event, dict):
            continue
        model = event.get("model")
        if isinstance(model, str):
            stage.set("gen_ai.response.model", model)
        usage = event.get("usage")
        if isinstance(usage, dict):
            for key, name in (
                ("prompt_tokens", "gen_ai.usage.input_tokens"),
                ("completion_tokens", "gen_ai.usage.output_tokens"),
            ):
                if isinstance(usage.get(key), int):
                    stage.set(name, usage[key])
            return

"""Parsing what clients send: JSON bodies into typed requests, `x-sim-*` headers into overrides.

Every malformed input becomes an OpenAI-shaped 400 (`hasten.errors.InvalidRequest`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from hasten.errors import InvalidRequest
from hasten.simulator.arguments import ArgumentFrame, argument_frame
from hasten.simulator.faults import FaultKind
from hasten.simulator.textgen import chat_prompt_tokens, completion_prompt_tokens
from hasten.wire import exactjson

# Request bodies, the control endpoints' included: far above any real one, still bounded.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_CHOICES = 128
# What one request may make the simulator generate: it builds every answer in memory, so an
# unbounded max_tokens or x-sim-tokens (2**31 tokens: tens of GB) would take the process
# down. Real models refuse such values with a 400 too (their output limits are 16k-128k).
MAX_COMPLETION_TOKENS = 32_768
MAX_GENERATED_TOKENS = 131_072  # n x tokens per choice
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's own limit on one embeddings request
MAX_STOP_SEQUENCES = 4
MAX_CHAT_TOP_LOGPROBS = 20  # OpenAI's limits: top_logprobs on chat, logprobs on completions
MAX_COMPLETION_LOGPROBS = 5
MAX_TOOL_CALLS = 8  # parallel calls one choice makes at most
HEADER_PREFIX = b"x-sim-"
TRACEPARENT = b"traceparent"
# version 00: "00-" trace id (32 hex) "-" parent id (16 hex) "-" flags (2 hex), 55 bytes.
_TRACEPARENT_BYTES = 55
_HEX = frozenset(b"0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Overrides:
    """Per-request behaviour forced by `x-sim-*` headers (None: use the config)."""

    first_token_ms: float | None = None
    decode_ms: float | None = None
    fail: FaultKind | None = None
    fail_after_chunks: int | None = None
    retry_after_s: float | None = None
    num_tokens: int | None = None
    # The W3C traceparent's trace id and parent span id ([simulator] draw_by = "trace").
    trace: tuple[bytes, bytes] | None = None


NO_OVERRIDES = Overrides()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A chat or text completion request, reduced to what the simulator needs."""

    model: str
    prompt_tokens: list[str]
    prompt_json: bytes  # canonical prompt bytes that seed the generated text
    stream: bool
    include_usage: bool
    num_choices: int
    max_tokens: int | None
    stops: tuple[str, ...]
    seed: int | None
    # Token log probabilities in the answer (chat ``logprobs: true``, completions
    # ``logprobs: k``) and how many alternatives each token lists.
    has_logprobs: bool = False
    num_top_logprobs: int = 0
    # The functions each choice calls (chat ``tools``): then it answers with tool calls,
    # each call's arguments framed by its tool's schema (one frame per name).
    tool_names: tuple[str, ...] = ()
    argument_frames: tuple[ArgumentFrame, ...] = ()
    # An assistant message to continue (vLLM's ``continue_final_message``, DeepSeek's
    # ``prefix: true``): the answer is what follows it.
    prefix: str = ""


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    texts: list[str]
    num_dims: int | None
    encoding_format: str


def _header_number(name: str, raw: bytes) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(f"header {name} must be a number >= 0", param=name)
    return value


def _header_count(name: str, raw: bytes, maximum: int | None = None) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidRequest(f"header {name} must be an integer >= 0", param=name)
    if maximum is not None and value > maximum:
        raise InvalidRequest(f"header {name} must be at most {maximum}", param=name)
    return value


def _header_fault(raw: bytes) -> FaultKind:
    try:
        return FaultKind(raw.decode("latin-1").strip().lower())
    except ValueError:
        raise InvalidRequest(
            f"header x-sim-fail must be one of {', '.join(FaultKind)}", param="x-sim-fail"
        ) from None


def _trace(raw: bytes) -> tuple[bytes, bytes] | None:
    """(trace id, parent id) of a version-00 traceparent; None for anything else, which W3C
    says a receiver ignores (all-zero ids included)."""
    value = raw.strip()
    if len(value) != _TRACEPARENT_BYTES or not value.startswith(b"00-"):
        return None
    parts = value.split(b"-")
    if len(parts) != 4 or [len(part) for part in parts] != [2, 32, 16, 2]:
        return None
    _, trace_id, parent_id, flags = parts
    if not _HEX.issuperset(trace_id + parent_id + flags):
        return None
    if trace_id == b"0" * 32 or parent_id == b"0" * 16:
        return None
    return trace_id, parent_id


def parse_overrides(headers: Iterable[tuple[bytes, bytes]]) -> Overrides:
    """Reads the `x-sim-*` headers; returns the shared NO_OVERRIDES when there are none."""
    found: dict[str, Any] = {}
    for raw_name, raw_value in headers:
        if raw_name == TRACEPARENT:
            if (trace := _trace(raw_value)) is not None:
                found["trace"] = trace
            continue
        if not raw_name.startswith(HEADER_PREFIX):
            continue
        name = raw_name.decode("latin-1")
        if name == "x-sim-ttft-ms":
            found["first_token_ms"] = _header_number(name, raw_value)
        elif name == "x-sim-decode-ms":
            found["decode_ms"] = _header_number(name, raw_value)
        elif name == "x-sim-fail":
            found["fail"] = _header_fault(raw_value)
        elif name == "x-sim-fail-after-chunks":
            found["fail_after_chunks"] = _header_count(name, raw_value)
        elif name == "x-sim-retry-after":
            found["retry_after_s"] = _header_number(name, raw_value)
        elif name == "x-sim-tokens":
            found["num_tokens"] = _header_count(name, raw_value, MAX_COMPLETION_TOKENS)
        else:
            raise InvalidRequest(f"unknown simulator header {name}", param=name)
    return Overrides(**found) if found else NO_OVERRIDES


def _model(data: dict[str, Any]) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter", param="model")
    return model


def _optional_int(data: dict[str, Any], name: str, minimum: int, maximum: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidRequest(f"{name} must be an integer in [{minimum}, {maximum}]", param=name)
    return value


def _stops(data: dict[str, Any]) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if (
        isinstance(stop, list)
        and len(stop) <= MAX_STOP_SEQUENCES
        and all(isinstance(item, str) for item in stop)
    ):
        return tuple(item for item in stop if item)
    raise InvalidRequest("stop must be a string or a list of up to 4 strings", param="stop")


def _generation(
    data: dict[str, Any], prompt_tokens: list[str], prompt_json: bytes
) -> GenerationRequest:
    stream = data.get("stream") is True
    options = data.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    name = "max_completion_tokens"
    max_tokens = _optional_int(data, name, 1, MAX_COMPLETION_TOKENS)
    if max_tokens is None:
        name = "max_tokens"
        max_tokens = _optional_int(data, name, 1, MAX_COMPLETION_TOKENS)
    num_choices = _optional_int(data, "n", 1, MAX_CHOICES) or 1
    if max_tokens is not None and num_choices * max_tokens > MAX_GENERATED_TOKENS:
        raise InvalidRequest(
            f"n x {name} must be at most {MAX_GENERATED_TOKENS} tokens, "
            f"got {num_choices} x {max_tokens}",
            param=name,
        )
    return GenerationRequest(
        model=_model(data),
        prompt_tokens=prompt_tokens,
        prompt_json=prompt_json,
        stream=stream,
        include_usage=include_usage,
        num_choices=num_choices,
        max_tokens=max_tokens,
        stops=_stops(data),
        seed=_optional_int(data, "seed", -(2**63), 2**64),
    )


def parse_chat_request(data: dict[str, Any]) -> GenerationRequest:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty array", param="messages")
    if not all(isinstance(message, dict) for message in messages):
        raise InvalidRequest("every message must be an object", param="messages")
    prefix = _continued_prefix(data, messages)
    # A continuation is seeded by the question alone, so it goes on with the answer it began.
    seeded = messages[:-1] if prefix is not None else messages
    request = _generation(data, chat_prompt_tokens(messages), exactjson.dumps(seeded))
    if prefix:
        request = replace(request, prefix=prefix)
    has_logprobs = data.get("logprobs") is True
    num_top = _optional_int(data, "top_logprobs", 0, MAX_CHAT_TOP_LOGPROBS) or 0
    tool_names, frames = _tools_called(data)
    if not (has_logprobs or tool_names):
        return request
    return replace(
        request,
        has_logprobs=has_logprobs,
        num_top_logprobs=num_top,
        tool_names=tool_names,
        argument_frames=frames,
    )


def _continued_prefix(data: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """The last message's text when the request asks to continue it, else None."""
    last = messages[-1]
    if last.get("role") != "assistant":
        return None
    if data.get("continue_final_message") is not True and last.get("prefix") is not True:
        return None
    content = last.get("content")
    if not isinstance(content, str):
        raise InvalidRequest("a continued assistant message needs text content", param="messages")
    return content


def _tools_called(data: dict[str, Any]) -> tuple[tuple[str, ...], tuple[ArgumentFrame, ...]]:
    """The functions called and their argument frames: the named ``tool_choice``, else
    every tool (the first only without ``parallel_tool_calls``); none for ``tool_choice:
    "none"``, and none when the turn answers a tool result and ``tool_choice`` is absent or
    ``"auto"`` (the model read what its call returned and answers in text, so an agent's
    loop ends; ``"required"`` or a named tool still calls). Deterministic, so a test knows
    what it gets; a real model chooses."""
    tools = data.get("tools")
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise InvalidRequest("tools must be an array", param="tools")
    frames: dict[str, ArgumentFrame] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequest("every tool needs a function with a name", param="tools")
        assert isinstance(function, dict)
        frames.setdefault(name, argument_frame(function.get("parameters")))
    names = list(frames)
    choice = data.get("tool_choice")
    if choice == "none" or not names:
        return (), ()
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if name not in names:
            raise InvalidRequest("tool_choice names no tool in tools", param="tool_choice")
        called = [name]
    elif choice in (None, "auto") and _answers_a_tool_result(data.get("messages")):
        return (), ()
    elif data.get("parallel_tool_calls") is False:
        called = names[:1]
    else:
        called = names[:MAX_TOOL_CALLS]
    return tuple(called), tuple(frames[name] for name in called)


def with_tool_calls_capped(request: GenerationRequest, max_calls: int) -> GenerationRequest:
    """``request`` calling at most ``max_calls`` of its tools (``SimConfig.max_tool_calls``);
    with none left it answers in text."""
    if len(request.tool_names) <= max_calls:
        return request
    return replace(
        request,
        tool_names=request.tool_names[:max_calls],
        argument_frames=request.argument_frames[:max_calls],
    )


def _answers_a_tool_result(messages: Any) -> bool:
    """Whether a tool message came after the last assistant message (a Messages turn with
    tool results and text becomes tool messages and a user message)."""
    turns: list[Any] = messages if isinstance(messages, list) else []
    for message in reversed(turns):
        role: Any = message.get("role") if isinstance(message, dict) else None
        if role == "assistant":
            return False
        if role == "tool":
            return True
    return False


def parse_completion_request(data: dict[str, Any]) -> GenerationRequest:
    prompt = data.get("prompt")
    if not isinstance(prompt, str | list):
        raise InvalidRequest("prompt must be a string or an array", param="prompt")
    request = _generation(data, completion_prompt_tokens(prompt), exactjson.dumps(prompt))
    num_top = _optional_int(data, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if num_top is None:
        return request
    return replace(request, has_logprobs=True, num_top_logprobs=num_top)


def _embedding_texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and len(value) > MAX_EMBEDDING_INPUTS:
        raise InvalidRequest(
            f"input must have at most {MAX_EMBEDDING_INPUTS} items, got {len(value)}",
            param="input",
        )
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return list(value)
        if all(isinstance(item, int) for item in value):
            return [" ".join(str(token_id) for token_id in value)]
        if all(isinstance(item, list) for item in value):
            return [" ".join(str(token_id) for token_id in item) for item in value]
    raise InvalidRequest("input must be a string or a non-empty array", param="input")


def parse_embedding_request(data: dict[str, Any]) -> EmbeddingRequest:
    encoding_format = data.get("encoding_format") or "float"
    if encoding_format not in ("float", "base64"):
        raise InvalidRequest("encoding_format must be float or base64", param="encoding_format")
    return EmbeddingRequest(
        model=_model(data),
        texts=_embedding_texts(data.get("input")),
        num_dims=_optional_int(data, "dimensions", 1, 8192),
        encoding_format=encoding_format,
    )

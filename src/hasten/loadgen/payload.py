"""Request bodies for the OpenAI chat and completions endpoints, encoded once per prompt."""

from __future__ import annotations

from typing import Any, Literal

import orjson

from hasten.loadgen.workload import Prompt

Endpoint = Literal["chat", "completions"]

ENDPOINT_PATHS: dict[Endpoint, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
}


def endpoint_url(base_url: str, endpoint: Endpoint) -> str:
    return base_url.rstrip("/") + ENDPOINT_PATHS[endpoint]


def encode_body(
    prompt: Prompt,
    *,
    endpoint: Endpoint,
    model: str,
    stream: bool,
    temperature: float | None,
    max_tokens: int | None,
    extra_body: dict[str, Any] | None = None,
) -> bytes:
    """The JSON request body for ``prompt``; ``None`` parameters are left to the server."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        body["messages"] = list(prompt.messages)
    else:
        body["prompt"] = prompt.as_text()
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body["stream"] = stream
    if stream:
        # Lets tokens/s use the server's count instead of counting chunks.
        body["stream_options"] = {"include_usage": True}
    if extra_body:
        body.update(extra_body)
    return orjson.dumps(body)

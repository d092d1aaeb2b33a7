"""The official SDKs wired to canned answers through ``httpx2.MockTransport`` (httpx2 is
the SDKs' own HTTP client): what hasten produces, parsed by the code an application runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson

SSE = "text/event-stream"
JSON = "application/json"


@dataclass
class Canned:
    """Answers every request with ``body`` (SSE when ``is_stream``); keeps the requests."""

    body: bytes
    status: int = 200
    is_stream: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        self.requests.append(orjson.loads(request.content) if request.content else {})
        content_type = SSE if self.is_stream and self.status == 200 else JSON
        return httpx.Response(
            self.status, content=self.body, headers={"content-type": content_type}
        )


Handler = Callable[[httpx.Request], httpx.Response]


def openai_client(handler: Handler) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="test-key",
        base_url="http://upstream.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def anthropic_client(handler: Handler) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test-key",
        base_url="http://upstream.test",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )

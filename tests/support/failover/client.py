"""One client request through the gateway, observed byte by byte and bounded in time.

Nothing here judges (``verdict`` does): it records the status, the text, whether the answer
ended properly, the error object if one came, and anything wrong with the bytes themselves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from tests.support.failover.verdict import Observation

CHAT_PATH = "/v1/chat/completions"


def _error_object(data: object) -> Mapping[str, object] | None:
    """The OpenAI error object of a parsed body or event, if it has that shape."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error
    return None


def _routing_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower().startswith("x-hasten-")}


class _Seen:
    """What a request has shown so far (kept when the bound cuts it short)."""

    def __init__(self) -> None:
        self.status = 0
        self.pieces: list[str] = []
        self.is_complete = False
        self.error: Mapping[str, object] | None = None
        self.problem = ""
        self.headers: dict[str, str] = {}

    def observation(self, elapsed_s: float) -> Observation:
        text = "".join(self.pieces)
        return Observation(
            self.status, text, self.is_complete, self.error, self.problem, elapsed_s, self.headers
        )


async def ask(
    client: httpx.AsyncClient,
    base_url: str,
    body: Mapping[str, Any],
    *,
    bound_s: float,
    headers: Mapping[str, str] | None = None,
) -> Observation:
    """Sends ``body``; never raises. Past ``bound_s`` without an answer it is a hang."""
    seen = _Seen()
    started_s = time.perf_counter()
    try:
        async with client.stream(
            "POST",
            base_url + CHAT_PATH,
            json=body,
            headers=dict(headers or {}),
            timeout=httpx.Timeout(bound_s),
        ) as response:
            seen.status = response.status_code
            seen.headers = _routing_headers(response)
            deadline_s = started_s + bound_s
            if body.get("stream") and response.status_code == 200:
                await _read_stream(response, seen, deadline_s)
            else:
                _read_whole(await _bounded_read(response, deadline_s), seen)
    except TimeoutError:
        seen.problem = f"hang: no complete answer within {bound_s:g} s"
    except httpx.TimeoutException:
        seen.problem = f"hang: no complete answer within {bound_s:g} s"
    except httpx.HTTPError as exc:
        if not seen.problem:
            what = "stream broke" if seen.status else "no response"
            seen.problem = f"{what}: {type(exc).__name__}: {exc}"[:200]
    return seen.observation(time.perf_counter() - started_s)


async def _bounded_read(response: httpx.Response, deadline_s: float) -> bytes:
    parts: list[bytes] = []
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        if time.perf_counter() > deadline_s:
            raise TimeoutError
    return b"".join(parts)


async def _read_stream(response: httpx.Response, seen: _Seen, deadline_s: float) -> None:
    async for line in response.aiter_lines():
        if time.perf_counter() > deadline_s:
            raise TimeoutError  # a trickle never ending is a hang too
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if seen.is_complete:
            seen.problem = "data after [DONE]"
            return
        if data == "[DONE]":
            seen.is_complete = seen.error is None
            continue
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            seen.problem = f"an SSE data line that is not JSON reached the client: {data[:40]!r}"
            continue
        error = _error_object(event)
        if error is not None:
            seen.error = error
            continue
        if isinstance(event, dict) and "error" in event:
            seen.problem = "an SSE error event that is not OpenAI-shaped"
            continue
        choices = event.get("choices") if isinstance(event, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                seen.pieces.append(str(delta.get("content") or ""))
    if not seen.is_complete and seen.error is None and not seen.problem:
        seen.problem = "the stream ended without [DONE] or an error event"


def _read_whole(raw: bytes, seen: _Seen) -> None:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        seen.problem = f"a {seen.status} body that is not JSON: {raw[:40]!r}"
        return
    if seen.status != 200:
        seen.error = _error_object(data)
        if seen.error is None:
            seen.problem = f"a {seen.status} body that is not an OpenAI error: {raw[:60]!r}"
        return
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        seen.problem = f"a 200 body without a message: {raw[:60]!r}"
        return
    seen.pieces.append(str(content or ""))
    seen.is_complete = True

"""A hostile upstream: endless bodies and streams, lying content types, events after
``[DONE]``, streams cut short, answers without usage (issue 41).

One ASGI app; the request's ``model`` names the behaviour (``SCENARIOS``), so one gateway
route (``*``) reaches them all. Endless answers are sent at a bounded rate
(``rate_bytes_per_s``) so that a gateway without a cap holds a lot, but not all the
machine's memory, before its total timeout; every endless loop stops when the gateway hangs
up. ``calls`` counts the requests per scenario (a cached answer makes none).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import orjson

from tests.support.gateway import read_request

DEFAULT_RATE_BYTES_PER_S = 64 * 1024 * 1024
_PIECE_BYTES = 64 * 1024
_HEAD = {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1, "model": "h"}


def chunk_event(content: str, *, index: int = 0, finish: str | None = None) -> bytes:
    choice = {"index": index, "delta": {"content": content}, "finish_reason": finish}
    return b"data: " + orjson.dumps({**_HEAD, "choices": [choice]}) + b"\n\n"


def usage_event(prompt_tokens: int, completion_tokens: int) -> bytes:
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return b"data: " + orjson.dumps({**_HEAD, "choices": [], "usage": usage}) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def whole_stream(words: list[str], *, usage: tuple[int, int] | None = None) -> bytes:
    """A proper stream of ``words`` (one event each), its finish, its usage, ``[DONE]``."""
    events = [chunk_event(word + " ") for word in words]
    events.append(chunk_event("", finish="stop"))
    if usage is not None:
        events.append(usage_event(*usage))
    return b"".join(events) + DONE


class HostileUpstream:
    """The ASGI app. ``SCENARIOS`` lists what ``model`` can ask for."""

    SCENARIOS = (
        "endless-json",  # a 200 JSON body that never ends (embeddings, whole answers)
        "endless-stream",  # valid token events forever, never [DONE]
        "endless-tiny-events",  # the smallest valid events forever ("data: 0")
        "endless-event",  # one event that never ends (no blank line)
        "endless-error-500",  # a retryable status whose body never ends
        "endless-error-400",  # a final status whose body never ends
        "lying-json-stream",  # a stream request answered as application/json, not JSON inside
        "lying-no-type-stream",  # the same with no content type
        "lying-text-stream",  # the same as text/plain
        "lying-text-body",  # a whole answer that is no JSON, as text/plain
        "events-after-done",  # a proper stream, then more events after [DONE]
        "no-finish-reason",  # ends with [DONE] but no choice ever finished
        "no-usage",  # a long proper stream (max_tokens honoured) that never sends usage
        "usage",  # the same with usage, when asked
        "slow-body",  # some JSON, then silence (for timeouts)
        "slow-stream",  # some events, then silence (for timeouts)
    )

    def __init__(self, *, rate_bytes_per_s: float = DEFAULT_RATE_BYTES_PER_S) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self.calls: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        # "no-usage" and "usage": words (one token each) per answer unless max_tokens says
        # fewer, sent words_per_piece at a time every piece_delay_s; what each call sent
        # (a client that leaves stops it) is in sent_words, by call, with its prompt tokens.
        self.num_words = 2000
        self.words_per_piece = 20
        self.piece_delay_s = 0.001
        self.prompt_tokens = 10
        self.sent_words: list[int] = []
        self.slow_bytes = 4 * 1024 * 1024  # what "slow-*" send before going silent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = orjson.loads(await read_request(receive))
        self.requests.append(request)
        scenario = str(request.get("model", ""))
        self.calls[scenario] += 1
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await self._answer(scenario, request, send, gone)
        finally:
            watcher.cancel()

    async def _answer(
        self, scenario: str, request: dict[str, Any], send: Any, gone: asyncio.Event
    ) -> None:
        json_type, sse_type = b"application/json", b"text/event-stream"
        if scenario == "endless-json":
            await _start(send, 200, json_type)
            await self._endless(send, gone, b'{"object": "list", "data": [', b"0.12345678, ")
        elif scenario == "endless-stream":
            await _start(send, 200, sse_type)
            await self._endless(send, gone, b"", chunk_event("token"))
        elif scenario == "endless-tiny-events":
            await _start(send, 200, sse_type)
            await self._endless(send, gone, chunk_event("first"), b"data:0\n\n")
        elif scenario == "endless-event":
            await _start(send, 200, sse_type)
            await self._endless(send, gone, chunk_event("first") + b'data: {"x": "', b"y" * 64)
        elif scenario in ("endless-error-500", "endless-error-400"):
            await _start(send, int(scenario[-3:]), json_type)
            await self._endless(send, gone, b'{"error": {"message": "', b"z" * 64)
        elif scenario.startswith("lying-"):
            content_type = {"lying-json-stream": json_type, "lying-text-stream": b"text/plain"}
            body = chunk_event("fine") + b"data: \xff\xfe not json\n\n" + whole_stream(["ok"])
            await _start(send, 200, content_type.get(scenario))
            await _body(send, body, more=False)
        elif scenario == "lying-text-body":
            await _start(send, 200, b"text/plain")
            await _body(send, b"\xff not json, whatever it says", more=False)
        elif scenario == "events-after-done":
            await _start(send, 200, sse_type)
            extra = chunk_event("after the end") + b"data: {not json\n\n"
            await _body(send, whole_stream(["whole"], usage=(3, 2)) + extra, more=False)
        elif scenario == "no-finish-reason":
            await _start(send, 200, sse_type)
            await _body(send, chunk_event("cut ") + chunk_event("short") + DONE, more=False)
        elif scenario in ("no-usage", "usage"):
            await _start(send, 200, sse_type)
            max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
            num_words = min(self.num_words, max_tokens or self.num_words)
            asks_usage = (request.get("stream_options") or {}).get("include_usage") is True
            usage = (self.prompt_tokens, num_words) if scenario == "usage" else None
            await self._words(send, gone, num_words, usage if asks_usage else None)
        elif scenario == "slow-body":
            await _start(send, 200, json_type)
            await _body(send, b'{"object": "list", "data": [' + b"1, " * (self.slow_bytes // 3))
            await gone.wait()
        elif scenario == "slow-stream":
            await _start(send, 200, sse_type)
            event = chunk_event("slow")
            await _body(send, event * (self.slow_bytes // len(event)))
            await gone.wait()
        else:
            body = orjson.dumps({"error": {"message": f"unknown scenario {scenario!r}"}})
            await _start(send, 404, json_type)
            await _body(send, body, more=False)

    async def _endless(self, send: Any, gone: asyncio.Event, first: bytes, unit: bytes) -> None:
        """``first``, then ``unit`` repeated forever at ``rate_bytes_per_s``, until the
        gateway hangs up."""
        piece = unit * max(1, _PIECE_BYTES // len(unit))
        if first:
            await _body(send, first)
        started_s, num_sent = time.monotonic(), 0
        while not gone.is_set():
            await _body(send, piece)
            num_sent += len(piece)
            ahead_s = num_sent / self.rate_bytes_per_s - (time.monotonic() - started_s)
            await asyncio.sleep(max(0.0, ahead_s))

    async def _words(
        self, send: Any, gone: asyncio.Event, num_words: int, usage: tuple[int, int] | None
    ) -> None:
        """``num_words`` token events in pieces, then the finish, the usage if any and
        ``[DONE]``; stops when the client leaves. Counts what it sent in ``sent_words``."""
        call = len(self.sent_words)
        self.sent_words.append(0)
        for start in range(0, num_words, self.words_per_piece):
            if gone.is_set():
                return
            end = min(num_words, start + self.words_per_piece)
            await _body(send, b"".join(chunk_event(f"w{i} ") for i in range(start, end)))
            self.sent_words[call] += end - start
            await asyncio.sleep(self.piece_delay_s)
        tail = chunk_event("", finish="stop")
        if usage is not None:
            tail += usage_event(*usage)
        await _body(send, tail + DONE, more=False)


async def _start(send: Any, status: int, content_type: bytes | None) -> None:
    headers = [] if content_type is None else [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _body(send: Any, data: bytes, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})

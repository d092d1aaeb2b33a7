"""What a response looked like from the client's side, taken at the ASGI ``send``.

One wrapper around ``send`` sees every message the client gets, so the timings the client
saw (first byte, last byte, the gaps between chunks) are taken in one place, with one clock
read per body chunk, rather than by every path of the proxy.
"""

from __future__ import annotations

import time

import orjson

from hasten.wire.asgi import Message, Send

_ERROR_EVENT = b'data: {"error"'


class ResponseTrack:
    """Wraps ``send``; records the status, the first and last byte and every chunk gap."""

    __slots__ = (
        "_send",
        "end_s",
        "error_code",
        "first_s",
        "gaps_s",
        "last_s",
        "prev",
        "start_s",
        "status",
        "tail",
    )

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0
        self.start_s: float | None = None  # the response start (headers)
        self.first_s: float | None = None  # the first non-empty body chunk
        self.last_s = 0.0
        self.end_s: float | None = None  # the last body message
        self.gaps_s: list[float] = []
        # The last two chunks: where a usage event is, if the client got one.
        self.tail = self.prev = b""
        self.error_code: str | None = None  # of an error event ending a stream

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            body: bytes = message.get("body", b"")
            now_s = time.perf_counter()
            if body:
                if self.first_s is None:
                    self.first_s = now_s
                else:
                    self.gaps_s.append(now_s - self.last_s)
                self.last_s = now_s
                self.prev, self.tail = self.tail, body
                if body.startswith(_ERROR_EVENT):
                    self.error_code = _event_code(body)
            if not message.get("more_body", False):
                self.end_s = now_s
        elif message["type"] == "http.response.start":
            self.status = message["status"]
            self.start_s = time.perf_counter()
        await self._send(message)


def _event_code(event: bytes) -> str:
    try:
        parsed = orjson.loads(event[len(b"data: ") :].strip())
        code = parsed["error"].get("code")
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
        return "stream_error"
    return code if isinstance(code, str) and code else "stream_error"

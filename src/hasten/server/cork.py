"""A response's head written together with its first body bytes: one socket write, not two.

uvicorn writes the status line and headers the moment the app sends
``http.response.start``, and the body with the next message: two ``send`` syscalls and, on
loopback or a fast network, two wake-ups of the client for a response it reads as one. The
gateway's whole-body answers (every non-stream response) send both messages back to back,
so ``HeadCork`` stands in for the transport of one request's cycle and holds the head until
the first body write, which carries it. A head whose body is not written in the same turn
of the event loop (a stream waiting for its next chunk) goes out on the loop's next turn,
so no client waits on the cork for more than one turn.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class _Cycle(Protocol):
    """What the cork reads of uvicorn's ``RequestResponseCycle``."""

    response_started: bool


class HeadCork:
    """The transport one request's cycle writes to; holds its response head (see above)."""

    __slots__ = ("_cycle", "_head", "_is_head_pending", "_loop", "_transport")

    def __init__(
        self, transport: asyncio.Transport, cycle: _Cycle, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._transport, self._cycle, self._loop = transport, cycle, loop
        self._head = b""
        self._is_head_pending = True  # the cycle's first write once the response started

    def write(self, data: bytes) -> None:
        if self._is_head_pending and self._cycle.response_started:
            # uvicorn marks the response started just before it writes the head: this is it
            # (a ``100 Continue`` written earlier went straight through).
            self._is_head_pending = False
            self._head = data
            self._loop.call_soon(self.flush)
            return
        head = self._head
        if head:
            self._head = b""
            data = head + data
        self._transport.write(data)

    def flush(self) -> None:
        """Writes a head still held (its body did not come in the same turn)."""
        head = self._head
        if head:
            self._head = b""
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        # Anything else uvicorn may ask of its transport is the real transport's.
        return getattr(self._transport, name)

"""The HTTP/1.1 connection under uvicorn, with limits a hostile client cannot get around.

uvicorn's httptools protocol buffers a request head of any size (a 64 MiB header was read
whole and its memory kept) and waits forever for a slow one (slowloris). ``protocol_for``
returns a thin subclass, one per server, that
- counts URL and head bytes as they arrive and answers 414 / 431 before buffering more;
- gives the head ``header_timeout_s`` from the connection (or from the next request's first
  byte on a kept-alive one) and the body ``body_timeout_s`` from the end of the head, then
  answers 408;
- caps the open connections of one client address (429).
These answers are written on the socket directly, as OpenAI-shaped JSON: no ASGI app runs
for a request refused here. The connection is then half-closed and drained for a moment,
so the client reads the answer instead of a reset. A normal request costs a few integer
comparisons: timers are armed only when a head or body spans several reads.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, ClassVar

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from hasten.config import ServerConfig
from hasten.errors import (
    HastenError,
    HeadersTooLarge,
    InvalidRequest,
    RequestTimeout,
    TooManyConnections,
    URLTooLong,
)
from hasten.server.cork import HeadCork

_log = logging.getLogger("hasten.connection")

_IDLE, _HEAD, _BODY = 0, 1, 2
# After a refusal the client may still be sending: read and drop for this long, so it sees
# the answer rather than a connection reset.
LINGER_S = 2.0
# Request line, separators and line ends: head bytes counted as neither URL nor headers.
_HEAD_SLACK_BYTES = 1024
# A malformed Content-Length or a forbidden byte in a header fails in the parser, before
# any ASGI app runs: answered in the OpenAI shape rather than uvicorn's plain text.
_UNPARSEABLE_MESSAGE = (
    "Invalid HTTP request: its request line or headers could not be parsed (for example a "
    "malformed Content-Length or a forbidden byte in a header)."
)
# ": " and CRLF around each header line, which the parser hands over without.
_HEADER_LINE_OVERHEAD_BYTES = 4


class ClientConnections:
    """Open connections per client address, for one server (``max_per_client`` 0: no cap)."""

    def __init__(self, max_per_client: int) -> None:
        self.max_per_client = max_per_client
        self._counts: dict[str, int] = {}

    def add(self, host: str) -> bool:
        count = self._counts.get(host, 0)
        if self.max_per_client and count >= self.max_per_client:
            return False
        self._counts[host] = count + 1
        return True

    def remove(self, host: str) -> None:
        count = self._counts.get(host, 0) - 1
        if count > 0:
            self._counts[host] = count
        else:
            self._counts.pop(host, None)

    def count(self, host: str) -> int:
        return self._counts.get(host, 0)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus head/URL size limits, read timeouts and a cap on
    connections per client; bound to one server's settings by ``protocol_for``."""

    limits: ClassVar[ServerConfig]
    clients: ClassVar[ClientConnections]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = self.limits
        self._max_url_bytes = limits.max_url_bytes
        self._max_header_bytes = limits.max_header_bytes
        self._max_head_bytes = limits.max_url_bytes + limits.max_header_bytes + _HEAD_SLACK_BYTES
        self._phase = _IDLE
        self._head_bytes = 0  # of the current head, in reads that ended inside it
        self._chunk_bytes = 0  # of the read being parsed
        self._has_completed = False  # a request ended inside the read being parsed
        self._timer: asyncio.TimerHandle | None = None
        self._counted_host: str | None = None
        self._refusal: HastenError | None = None
        self._is_refused = False

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        host = self.client[0] if self.client else None
        if host is not None:
            if not self.clients.add(host):
                limit = self.clients.max_per_client
                self._refuse(TooManyConnections(f"more than {limit} open connections from {host}"))
                return
            self._counted_host = host
        # From the connection on: one that never sends a byte is a slowloris too.
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._counted_host is not None:
            self.clients.remove(self._counted_host)
            self._counted_host = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._is_refused:
            return  # draining after a refusal
        # uvicorn's data_received, but a limit hit inside the parser answers with its own
        # status instead of a plain-text 400.
        self._unset_keepalive_if_required()
        self._chunk_bytes = len(data)
        self._has_completed = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            refusal, self._refusal = self._refusal, None
            if refusal is not None:
                self._refuse(refusal)
                return
            self.logger.warning("Invalid HTTP request received.")
            self._refuse(InvalidRequest(_UNPARSEABLE_MESSAGE, code="invalid_http_request"))
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._phase == _HEAD:
            # A read in which a request also ended began mid-read: its head bytes are not
            # known and are skipped (at most one read uncounted, pipelining only).
            if not self._has_completed:
                self._head_bytes += len(data)
                if self._head_bytes > self._max_head_bytes:
                    self._refuse(self._headers_too_large())
                    return
            if self._timer is None:
                self._arm(self.limits.header_timeout_s)
        elif self._phase == _BODY and self._timer is None and not self.pipeline:
            # A queued pipelined request is not being read: its body cannot be late yet.
            self._arm(self.limits.body_timeout_s)

    # --- parser callbacks ---

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEAD
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self._max_url_bytes:
            self._refusal = URLTooLong(
                f"request URL exceeds the limit of {self._max_url_bytes} bytes"
            )
            raise self._refusal  # stops the parser; data_received answers

    def on_headers_complete(self) -> None:
        if self._timer is not None:  # inline, as in on_message_complete: the per-request path
            self._timer.cancel()
            self._timer = None
        self._phase = _BODY
        # Exact count only when the head could be over the limit: not for a normal request.
        if self._head_bytes + self._chunk_bytes > self._max_header_bytes:
            num_bytes = sum(len(n) + len(v) for n, v in self.headers)
            num_bytes += _HEADER_LINE_OVERHEAD_BYTES * len(self.headers)
            if num_bytes > self._max_header_bytes:
                self._refusal = self._headers_too_large()
                raise self._refusal
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # the new request's
            cycle.transport = HeadCork(self.transport, cycle, self.loop)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = _IDLE
        self._has_completed = True
        super().on_message_complete()

    # --- limits ---

    def _headers_too_large(self) -> HastenError:
        return HeadersTooLarge(
            f"request headers exceed the limit of {self._max_header_bytes} bytes"
        )

    def _arm(self, timeout_s: float) -> None:
        self._timer = self.loop.call_later(timeout_s, self._on_timeout)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timeout(self) -> None:
        self._timer = None
        if self._phase == _BODY:
            message = f"request body not received within {self.limits.body_timeout_s:g} s"
        else:
            message = f"request headers not received within {self.limits.header_timeout_s:g} s"
        self._refuse(RequestTimeout(message))

    def _refuse(self, error: HastenError) -> None:
        """Answers ``error`` (unless a response is under way), then closes the connection."""
        self._is_refused = True
        self._cancel_timer()
        self._unset_keepalive_if_required()
        transport = self.transport
        client = self.client[0] if self.client else "?"
        _log.debug("connection from %s refused: %d %s", client, error.status_code, error.code)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:
                cycle.transport.close()  # too late for a status: the response just stops
                return
            # The app, if it runs, now reads a disconnect and its writes are dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        if transport.is_closing():
            return
        body = error.to_json()
        head = [STATUS_LINE[error.status_code]]
        for name, value in self.server_state.default_headers:
            head.extend((name, b": ", value, b"\r\n"))
        head.append(
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % len(body)
        )
        transport.write(b"".join((*head, body)))
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.flow.resume_reading()
        self._timer = self.loop.call_later(LINGER_S, transport.close)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` for uvicorn's ``sockets=`` (not listening yet)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets it knows are TCP,
    # and without it small responses wait ~40 ms for delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def protocol_for(server: ServerConfig) -> type[HttpToolsProtocol]:
    """The protocol class for one uvicorn server: its limits and its own per-client counts."""

    class ServerProtocol(LimitedHttpToolsProtocol):
        limits = server
        clients = ClientConnections(server.max_connections_per_client)

    return ServerProtocol


def uvicorn_server(
    app: Any, log_level: str, limits: ServerConfig | None = None, log_format: str = "text"
) -> uvicorn.Server:
    """A uvicorn server for ``app`` that serves sockets it is given (``serve(sockets=...)``)."""
    # The gateway's connections get hasten's limits and OpenAI-shaped parser errors; the
    # demo simulator's (loopback) do not.
    http: Any = "httptools" if limits is None else protocol_for(limits)
    # In JSON mode uvicorn's own loggers go through hasten's handler, not its text one.
    log_config = None if log_format == "json" else uvicorn.config.LOGGING_CONFIG
    config = uvicorn.Config(
        app,
        log_level=log_level,
        log_config=log_config,
        access_log=False,
        http=http,
        loop="none",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)

"""One HTTP/1.1 client connection: writes a request, parses its response with httptools.

Whatever the peer sends, only hasten's errors come out (httptools' own, and anything else
the parser raises, are translated here), and what a peer can make us hold is bounded: a
head over ``max_header_bytes`` or ``max_num_headers`` is refused, and reading pauses while
more than ``MAX_BUFFERED_BYTES`` of body wait for the reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httptools

from hasten.errors import UpstreamConnectError, UpstreamError

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_NUM_HEADERS = 128
MAX_BUFFERED_BYTES = 1024 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class Http1Connection(asyncio.Protocol):
    """A keep-alive connection carrying one request at a time.

    ``start`` sends a request; ``wait`` blocks until something changes (head, body bytes,
    the end, an error). State is read from the attributes: ``is_head_done``, ``status``,
    ``headers`` (lower-cased names), ``take()`` for body bytes, ``is_complete`` and
    ``error`` (an ``UpstreamError``, set at most once per response).
    """

    def __init__(
        self,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_num_headers: int = DEFAULT_MAX_NUM_HEADERS,
    ) -> None:
        self._max_header_bytes = max_header_bytes
        self._max_num_headers = max_num_headers
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._chunks: list[bytes] = []
        self._num_buffered_bytes = 0
        self._num_head_bytes = 0
        self._num_headers = 0
        self._is_paused = False
        self._is_bodiless = False
        self.on_lost: Callable[[Http1Connection], None] | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.num_response_bytes = 0
        self.is_head_done = False
        self.is_complete = False
        self.is_keep_alive = False
        self.is_until_close = False  # no length, not chunked: the body ends with the connection
        self.is_lost = False
        self.error: UpstreamError | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            # Bytes nobody asked for (between responses): the stream cannot be trusted.
            self.is_keep_alive = False
            self.abort()
            return
        self.num_response_bytes += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("upstream switched protocols, which hasten does not speak"))
        except Exception as exc:
            # httptools wraps what a callback raised (our own limits) in a callback error.
            cause = exc.__context__
            if isinstance(cause, UpstreamError):
                self._fail(cause)
            else:
                self._fail(UpstreamError(f"upstream sent an unparseable response: {exc}"))
        else:
            if not self.is_head_done and self.num_response_bytes > self._max_header_bytes:
                self._fail(self._head_too_large())

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_lost = True
        self.is_keep_alive = False
        if self._parser is not None and not self.is_complete and self.error is None:
            if self.is_head_done and self.is_until_close:
                self._finish()
            elif self.is_head_done:
                self._fail(UpstreamError("upstream connection failed mid-response: closed"))
            else:
                self._fail(UpstreamConnectError("upstream closed the connection before answering"))
        if self.on_lost is not None:
            self.on_lost(self)

    def pause_writing(self) -> None:
        return None  # requests are small; a body is handed to the transport whole

    def resume_writing(self) -> None:
        return None

    # --- the request --------------------------------------------------------------------

    def start(self, data: bytes, body: bytes = b"", *, is_bodiless: bool = False) -> None:
        """Sends one request (``body`` is written after ``data``, when not already in it);
        ``is_bodiless`` for a response that has no body (HEAD, CONNECT)."""
        self._parser = httptools.HttpResponseParser(self)
        self._chunks = []
        self._num_buffered_bytes = self._num_head_bytes = self.num_response_bytes = 0
        self._num_headers = 0
        self._is_bodiless = is_bodiless
        self.status, self.headers = 0, {}
        self.is_head_done = self.is_complete = self.is_keep_alive = self.is_until_close = False
        self.error = None
        transport = self.transport
        if self.is_lost or transport is None or transport.is_closing():
            self.error = UpstreamConnectError("upstream closed the connection before answering")
            return
        try:
            transport.write(data)
            if body:
                transport.write(body)
        except Exception:
            # A transport closing under us (uvloop raises where asyncio only warns).
            self.error = UpstreamConnectError("upstream closed the connection before answering")

    async def wait(self, timeout_s: float) -> bool:
        """Until the state changes (True) or ``timeout_s`` passes (False)."""
        if timeout_s <= 0:
            return False
        assert self._loop is not None
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiter = waiter
        timer = self._loop.call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            if self._waiter is waiter:
                self._waiter = None

    def take(self) -> bytes:
        """The body bytes received and not yet taken, as one piece (b"" if none)."""
        chunks = self._chunks
        if not chunks:
            return b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._num_buffered_bytes = 0
        if self._is_paused and self.transport is not None:
            self._is_paused = False
            self.transport.resume_reading()
        return data

    def abort(self) -> None:
        """Drops the connection now (what cancels the request upstream)."""
        self.is_keep_alive = False
        if self.transport is not None:
            self.transport.abort()

    # --- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.is_complete:
            # A second response to one request: never trust this connection again.
            self.is_keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._num_head_bytes += len(name) + len(value) + 4
        if self._num_head_bytes > self._max_header_bytes:
            raise self._head_too_large()
        self._num_headers += 1
        if self._num_headers > self._max_num_headers:
            raise UpstreamError(f"upstream sent more than {self._max_num_headers} headers")
        key = name.decode("latin-1").lower()
        # The bytes survive a round trip (hasten.proxy.headers encodes them back this way).
        text = value.decode("utf-8", "surrogateescape")
        previous = self.headers.get(key)
        self.headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        if status < 100:  # not a status at all: waiting for a "real" one would hang
            raise UpstreamError(f"upstream sent an invalid status code {status}")
        if status < 200:
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self.headers, self._num_head_bytes, self._num_headers = {}, 0, 0
            return
        self.status = status
        self.is_head_done = True
        headers = self.headers
        self.is_until_close = (
            not self._is_bodiless
            and status not in _NO_BODY_STATUSES
            and "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        )
        if self._is_bodiless:
            self._finish(is_keep_alive=parser.should_keep_alive())
        else:
            self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._num_buffered_bytes += len(body)
        is_over = self._num_buffered_bytes > MAX_BUFFERED_BYTES
        if is_over and not self._is_paused and self.transport is not None:
            self._is_paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        parser = self._parser
        if parser is None or not self.is_head_done or self.is_complete:
            return  # an interim answer ended, or a response past the one we asked for
        self._finish(is_keep_alive=parser.should_keep_alive() and not self.is_until_close)

    # --- inner --------------------------------------------------------------------------

    def _finish(self, *, is_keep_alive: bool = False) -> None:
        self.is_complete = True
        self.is_keep_alive = is_keep_alive and not self.is_lost
        self._parser = None  # whatever comes next, unasked, closes the connection
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None and not self.is_complete:
            self.error = error
        self._parser = None
        self.is_keep_alive = False
        if self.transport is not None and not self.is_lost:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(True)

    def _head_too_large(self) -> UpstreamError:
        return UpstreamError(f"upstream sent a response head over {self._max_header_bytes} bytes")

"""One upstream attempt, up to the moment it has something a client can use.

An attempt is "ready" once it has a token (the first SSE event with content) for a stream,
the whole body of a non-stream 200, or a final non-retryable status; anything else is a
``Failed`` with a short reason the router learns from. Nothing here decides what to do next:
that is ``hasten.upstream.dispatch`` (doing) asking ``hasten.routing`` (deciding).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import orjson

from hasten.apis.api import Api
from hasten.config import UpstreamConfig
from hasten.errors import (
    HastenError,
    UpstreamBusy,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)
from hasten.routing.gate import InFlightGate, Slot
from hasten.upstream.bounded import MAX_ERROR_BODY_BYTES, TOO_LARGE_CODE, read_bounded, too_large
from hasten.upstream.bridge import Bridging
from hasten.upstream.integrity import MAX_EVENT_BYTES, check_json_body, malformed
from hasten.upstream.retry import is_retryable_status, parse_retry_after_s
from hasten.upstream.transport import Transport, UpstreamRequest, UpstreamResponse
from hasten.wire import exactjson
from hasten.wire.sse import DONE, SSEDecoder, event_data

ERROR_BODY_TIMEOUT_S = 5.0
BUSY = "busy"  # the reason of an attempt its upstream's gate refused: nothing was sent
# What a busy refusal asks the client to wait: no one knows when a slot frees (an answer
# ends every few seconds when the upstream is full), and a Retry-After is whole seconds, so
# the least it can say. The SDKs retry after it; longer would leave freed slots idle.
BUSY_RETRY_AFTER_S = 1.0
# The APIs whose requests take OpenAI's prompt_cache_key (Anthropic's would refuse it).
_PROMPT_CACHE_KEY_PATHS = frozenset({"/chat/completions", "/responses"})


class HeldResponse:
    """A response holding its upstream's in-flight slot until it is closed: whoever ends
    it (the proxy after the last byte, a loser's cancellation, an error read) frees it."""

    __slots__ = ("_response", "_slot", "headers", "status")

    def __init__(self, response: UpstreamResponse, slot: Slot) -> None:
        self._response, self._slot = response, slot
        self.status, self.headers = response.status, response.headers

    def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        return self._response.iter_chunks(idle_timeout_s)

    async def read(self, timeout_s: float) -> bytes:
        return await self._response.read(timeout_s)

    def close(self) -> None:
        try:
            self._response.close()
        finally:
            self._slot.release()


class BufferedResponse:
    """A response whose body was already read (a final upstream error we pass through)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    async def iter_chunks(self, idle_timeout_s: float) -> AsyncIterator[bytes]:
        if self.body:
            yield self.body

    async def read(self, timeout_s: float) -> bytes:
        return self.body

    def close(self) -> None:
        return None


async def buffer_response(
    response: UpstreamResponse, timeout_s: float, idle_timeout_s: float
) -> BufferedResponse:
    """An error answer read to pass on, within ``ERROR_BODY_TIMEOUT_S`` and
    ``MAX_ERROR_BODY_BYTES``: a body past either is replaced by hasten's own error (in the
    OpenAI shape, so the client still gets the status with a body it can read)."""
    # Lower-cased: aiohttp title-cases names, and the retry policy looks them up by name.
    headers = {name.lower(): value for name, value in response.headers.items()}
    try:
        body = await read_bounded(
            response.iter_chunks(idle_timeout_s),
            timeout_s=min(ERROR_BODY_TIMEOUT_S, timeout_s),
            max_bytes=MAX_ERROR_BODY_BYTES,
        )
    except HastenError as exc:
        body = b""
        if exc.code == TOO_LARGE_CODE:
            body = exc.to_json()
            headers["content-type"] = "application/json"
            headers.pop("content-length", None)
    finally:
        response.close()
    return BufferedResponse(response.status, headers, body)


class FirstTokenWatch:
    """Watches SSE bytes for the first event that carries output (or ends the stream), as
    the client's API reads its events (``Api.is_output``, ``Api.event_error``)."""

    def __init__(self, api: Api) -> None:
        self._api = api
        self._decoder = SSEDecoder()
        self.error_message: str | None = None
        self.is_malformed = False  # an event that is not JSON: no client may see it

    def feed(self, chunk: bytes) -> bool:
        decoder = self._decoder
        if decoder.is_idle and b"\r" not in chunk:
            # Event by event: a chunk often holds the whole answer, and only the events
            # up to its first token are of interest (the watch is done after that).
            start = 0
            while (end := chunk.find(b"\n\n", start)) >= 0:
                payload = event_data(chunk[start:end])
                start = end + 2
                if payload is not None and (verdict := self._verdict(payload)) is not None:
                    return verdict
            decoder.feed(chunk[start:])  # an unfinished event waits for the next chunk
            return False
        for payload in decoder.feed(chunk):
            if (verdict := self._verdict(payload)) is not None:
                return verdict
        return False

    def _verdict(self, payload: bytes) -> bool | None:
        """True: output or the end; False: a malformed event; None: look further."""
        if payload == DONE:
            return True
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.is_malformed = True
            return False
        error = self._api.event_error(event)
        if error is not None:
            self.error_message = error.message.removeprefix("upstream error mid-stream: ")
            return False
        if self._api.is_output(event):
            return True
        return None


def _untraced(error: HastenError) -> HastenError:
    """``error`` without its traceback: a failure is kept (the dispatch's last, a flight's
    end) past the frames that raised it, and those frames hold what was read."""
    return error.detached()


@dataclass(slots=True)
class Ready:
    """An attempt with something usable; for a stream, the bytes read up to the first token."""

    response: UpstreamResponse
    ttft_ms: float
    is_token: bool  # False for a final error status: no latency sample to learn from
    head: list[bytes] = field(default_factory=list)
    rest: AsyncIterator[bytes] | None = None


@dataclass(slots=True)
class Failed:
    reason: str  # connect_error, 429, 503, first_byte_timeout, ttft_timeout, stream_ended...
    error: HastenError | None = None
    buffered: BufferedResponse | None = None
    retry_after_s: float | None = None
    is_retryable_here: bool = False  # worth retrying on the same deployment


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    upstream: UpstreamConfig
    request: Bridging  # the leg to this upstream, in the API it speaks
    trace_headers: Mapping[str, str]  # the attempt's own traceparent, when tracing
    deadline_s: float
    is_stream: bool
    api: Api  # the client's: how the first token reads
    prompt_cache_key: str | None = None  # OpenAI routes by it too: keeps its cache warm
    # The upstream's in-flight cap, shared by every route using it (a fresh one: uncounted).
    gate: InFlightGate = field(default_factory=InFlightGate)


async def run_attempt(transport: Transport, spec: AttemptSpec) -> Ready | Failed:
    """One try against one upstream, up to its first token; never raises HastenError."""
    upstream = spec.upstream
    remaining_s = spec.deadline_s - time.monotonic()
    if remaining_s <= 0:
        return Failed("deadline", UpstreamTimeout("request deadline passed before trying"))
    try:
        leg = spec.request.leg(upstream)
    except HastenError as exc:  # no API in common: the next deployment may take it
        return Failed("unsupported_api", _untraced(exc))
    body = leg.body
    if spec.prompt_cache_key is not None and body and leg.path in _PROMPT_CACHE_KEY_PATHS:
        body = _with_prompt_cache_key(body, spec.prompt_cache_key)
    request_headers = {**leg.headers, **spec.trace_headers}
    request = UpstreamRequest(
        method="POST" if body else "GET",
        url=upstream.url + leg.path,
        headers=request_headers,
        body=body or None,
        connect_timeout_s=min(upstream.timeouts.connect_s, remaining_s),
        first_byte_timeout_s=min(upstream.timeouts.first_byte_s, remaining_s),
    )
    # Taken where the request is sent, by primaries, hedges, retries and failovers alike.
    slot = spec.gate.try_acquire()
    if slot is None:
        return busy(upstream.name, spec.gate.max_in_flight)
    started_s = time.perf_counter()
    try:
        response = await _send_holding(transport, request, slot)
    except UpstreamConnectError as exc:
        return Failed("connect_error", exc, is_retryable_here=True)
    except UpstreamTimeout as exc:
        return Failed("first_byte_timeout", exc)
    except UpstreamError as exc:
        return Failed("upstream_error", exc)
    if leg.answer is not None:
        response = leg.answer(response)  # read as the client's API from here on
    status = response.status
    if is_retryable_status(status):
        buffered = await buffer_response(
            response, spec.deadline_s - time.monotonic(), upstream.timeouts.idle_s
        )
        retry_after_s = parse_retry_after_s(buffered.headers)
        return Failed(str(status), None, buffered, retry_after_s, is_retryable_here=True)
    if status != 200:
        elapsed_ms = (time.perf_counter() - started_s) * 1000.0
        return Ready(response, elapsed_ms, is_token=False)
    if not spec.is_stream:
        return await _read_whole(response, upstream, spec.deadline_s, started_s)
    return await _await_first_token(response, upstream, spec.api, started_s)


async def _send_holding(
    transport: Transport, request: UpstreamRequest, slot: Slot
) -> UpstreamResponse:
    """The response, holding ``slot`` until it is closed; a send that fails or is
    cancelled (a hedge loser, a client gone) gives the slot back at once."""
    try:
        return HeldResponse(await transport.send(request), slot)
    except BaseException:
        slot.release()
        raise


def busy(name: str, max_in_flight: int) -> Failed:
    """An attempt refused by its upstream's full gate: nothing was sent. Not worth retrying
    here (waiting is the client's choice, told by Retry-After): the router moves on."""
    error = UpstreamBusy(
        f"upstream {name!r} is busy: {max_in_flight} requests in flight, its max_in_flight; "
        f"retry after {BUSY_RETRY_AFTER_S:g} s",
        retry_after_s=BUSY_RETRY_AFTER_S,
    )
    return Failed(BUSY, error, retry_after_s=BUSY_RETRY_AFTER_S)


def _with_prompt_cache_key(body: bytes, key: str) -> bytes:
    """``body`` with ``prompt_cache_key`` set, unless the client set its own (or the body is
    no JSON object this can add it to)."""
    try:
        parsed = exactjson.loads(body)
    except ValueError:
        return body
    if not isinstance(parsed, dict) or "prompt_cache_key" in parsed:
        return body
    return exactjson.dumps({**parsed, "prompt_cache_key": key})


async def _read_whole(
    response: UpstreamResponse, upstream: UpstreamConfig, deadline_s: float, started_s: float
) -> Ready | Failed:
    """A non-stream answer is usable only once complete: one cut off midway has reached
    no client yet, so it fails like a connect error and is retried or failed over. One
    past ``max_answer_bytes`` fails over too, never retried here (it would be as large)."""
    ttft_ms = (time.perf_counter() - started_s) * 1000.0
    try:
        body = await read_bounded(
            response.iter_chunks(upstream.timeouts.idle_s),
            timeout_s=deadline_s - time.monotonic(),
            max_bytes=upstream.max_answer_bytes,
        )
    except UpstreamTimeout as exc:
        return Failed("body_timeout", _untraced(exc))
    except UpstreamError as exc:
        if exc.code == TOO_LARGE_CODE:
            return Failed("too_large", _untraced(exc))
        return Failed("body_cut", _untraced(exc), is_retryable_here=True)
    finally:
        response.close()
    # Complete by HTTP yet cut mid-JSON (or not JSON at all): no client can use it, and
    # none has seen a byte of it, so it fails over like a body cut off with its connection.
    # Whatever content type the upstream claims: every API hasten serves answers JSON.
    if (error := check_json_body(body)) is not None:
        return Failed("malformed", error, is_retryable_here=True)
    return Ready(BufferedResponse(200, response.headers, body), ttft_ms, is_token=True)


async def _await_first_token(
    response: UpstreamResponse, upstream: UpstreamConfig, api: Api, started_s: float
) -> Ready | Failed:
    rest = response.iter_chunks(upstream.timeouts.idle_s)
    watch = FirstTokenWatch(api)
    head: list[bytes] = []
    num_head_bytes = 0
    max_head_bytes = min(MAX_EVENT_BYTES, upstream.max_answer_bytes)
    is_handed_over = False
    try:
        async for chunk in rest:
            head.append(chunk)
            num_head_bytes += len(chunk)
            if watch.feed(chunk):
                is_handed_over = True
                ttft_ms = (time.perf_counter() - started_s) * 1000.0
                return Ready(response, ttft_ms, True, head, rest)
            if watch.error_message is not None:
                error = UpstreamError(
                    f"upstream error before the first token: {watch.error_message}"
                )
                return Failed("stream_error_event", error)
            if watch.is_malformed:
                return Failed("malformed", malformed("an event that is not JSON"))
            if num_head_bytes > max_head_bytes:  # all of it held, none of it a token
                head.clear()
                if max_head_bytes < MAX_EVENT_BYTES:
                    return Failed("too_large", too_large(upstream.max_answer_bytes))
                error = malformed(f"over {MAX_EVENT_BYTES} bytes before the first token")
                return Failed("malformed", error)
    except HastenError as exc:
        return Failed("stream_error", _untraced(exc))
    finally:
        if not is_handed_over:
            response.close()
    return Failed("stream_ended", UpstreamError("upstream stream ended before the first token"))

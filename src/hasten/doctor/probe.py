"""The doctor's network probes: a few short, bounded requests, timed from the client's side.

Connection phases (DNS, TCP connect, TLS) are timed first (``connection.py``); the HTTP
probes then run on one aiohttp connection kept warm, so they pay one round trip each and no
handshakes. Every failure a person can act on
(unreachable host, refused key, not an OpenAI API, too slow) becomes a ``DoctorError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from hasten.doctor.connection import Target, parse_target, resolve, time_connections
from hasten.doctor.timings import ProbeTimings, StreamTiming, WholeTiming
from hasten.errors import DoctorError
from hasten.loadgen.sse import DONE, SSEParser, completion_tokens, inspect_chunk

DEFAULT_NUM_TRIES = 5
DEFAULT_MAX_TOKENS = 32
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_REQUEST_TIMEOUT_S = 20.0
MAX_NUM_TRIES = 50
NUM_WHOLE_TRIES = 2  # non-streamed answers: only their end-to-end time is needed
NUM_CACHE_REPEATS = 2
# Long enough for provider prompt caches (OpenAI caches prompts from 1024 tokens).
NUM_CACHE_PROMPT_WORDS = 1200
# Statuses a request that generates nothing may get and still time a round trip.
ROUND_TRIP_STATUSES = frozenset({200, 400, 404, 405, 422})
MAX_ERROR_BODY_BYTES = 4096
MAX_ERROR_MESSAGE_CHARS = 200
PROBE_PROMPT = "Count from one to one hundred in words, separated by spaces."
CACHE_FILLER = (
    "The harbour master keeps a ledger of every ship that enters, with its cargo, crew, "
    "flag and the hour of the tide it came in on."
)


@dataclass(frozen=True, slots=True)
class DoctorSettings:
    """What to probe and how hard: every count and wait is bounded."""

    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    key_env: str | None = None  # named in messages about a refused key, never its value
    num_tries: int = DEFAULT_NUM_TRIES
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = DEFAULT_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        if not 1 <= self.num_tries <= MAX_NUM_TRIES:
            raise ValueError(f"--tries must be within 1..{MAX_NUM_TRIES}, got {self.num_tries}")
        if self.max_tokens < 2:
            raise ValueError(f"--max-tokens must be >= 2 to time decoding, got {self.max_tokens}")
        if not self.timeout_s > 0 or not self.request_timeout_s > 0:
            raise ValueError("--timeout-s and --request-timeout-s must be > 0")


def _ms_since(started_s: float) -> float:
    return (time.perf_counter() - started_s) * 1000.0


async def probe(settings: DoctorSettings) -> ProbeTimings:
    """Runs every probe within ``settings.timeout_s``; raises DoctorError on failure."""
    target = parse_target(settings.base_url)
    try:
        async with asyncio.timeout(settings.timeout_s):
            return await _probe(target, settings)
    except TimeoutError:
        raise DoctorError(
            f"gave up after {settings.timeout_s:g} s (--timeout-s): the endpoint is too slow "
            f"for {settings.num_tries} tries of {settings.max_tokens} tokens"
        ) from None


async def _probe(target: Target, settings: DoctorSettings) -> ProbeTimings:
    dns_ms, addresses = await resolve(target)
    connect_ms, tls_ms = await time_connections(
        target, addresses, settings.num_tries, settings.request_timeout_s
    )
    headers = {"user-agent": "hasten-doctor", "accept": "application/json, text/event-stream"}
    if settings.api_key:
        headers["authorization"] = f"Bearer {settings.api_key}"
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1),
        timeout=aiohttp.ClientTimeout(total=settings.request_timeout_s),
        headers=headers,
    ) as session:
        http = HttpProber(session, target.base_url, settings)
        model, round_trip_ms, method = await http.round_trips()
        wholes = [await http.whole(model) for _ in range(min(NUM_WHOLE_TRIES, settings.num_tries))]
        streams = [await http.stream(model, settings.max_tokens) for _ in range(settings.num_tries)]
        cache_prompt = _cache_prompt()
        cold = await http.stream(model, 1, cache_prompt)
        repeats = [await http.stream(model, 1, cache_prompt) for _ in range(NUM_CACHE_REPEATS)]
    return ProbeTimings(
        base_url=target.base_url,
        host=target.host,
        port=target.port,
        is_tls=target.is_tls,
        model=model,
        max_tokens=settings.max_tokens,
        dns_ms=dns_ms,
        connect_ms=connect_ms,
        tls_ms=tls_ms,
        round_trip_ms=round_trip_ms,
        round_trip_method=method,
        streams=tuple(streams),
        wholes=tuple(wholes),
        cache_cold=cold,
        cache_repeats=tuple(repeats),
    )


def _probe_prompt() -> str:
    # A fresh nonce per request: no cache between us and the model (a hasten gateway, say)
    # may answer a timing probe.
    return f"[probe {secrets.token_hex(4)}] {PROBE_PROMPT}"


def _cache_prompt() -> str:
    """A long prompt, new to every cache (nonce first), then sent again to see a speed-up."""
    filler = CACHE_FILLER.split()
    words = (filler[i % len(filler)] for i in range(NUM_CACHE_PROMPT_WORDS))
    return f"[probe {secrets.token_hex(4)}] {' '.join(words)}\nReply with one word."


@contextlib.contextmanager
def _translated(method: str, url: str, timeout_s: float) -> Iterator[None]:
    """aiohttp's failures as a sentence for a person."""
    try:
        yield
    except TimeoutError:
        raise DoctorError(
            f"{method} {url}: no complete answer within {timeout_s:g} s (--request-timeout-s)"
        ) from None
    except aiohttp.ClientError as exc:
        raise DoctorError(f"{method} {url} failed: {exc}") from None


class HttpProber:
    """The HTTP probes, on one kept-alive connection of ``session``."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, settings: DoctorSettings
    ) -> None:
        self._session = session
        self._base_url = base_url
        self._settings = settings

    def _key_hint(self) -> str:
        env = self._settings.key_env
        if not self._settings.api_key:
            return "No key was sent: put it in $OPENAI_API_KEY or name its variable with --key-env."
        return f"The key from ${env} was sent and refused." if env else "The key was refused."

    async def _check(self, response: aiohttp.ClientResponse, what: str) -> None:
        if response.status < 400:
            return
        if response.status in (401, 403):
            # The server's message is not shown: some echo part of the key back.
            raise DoctorError(f"{what} answered {response.status}: {self._key_hint()}")
        raise DoctorError(f"{what} answered {response.status}: {await _error_message(response)}")

    async def round_trips(self) -> tuple[str, tuple[float, ...], str]:
        """The model to probe, and the warm round trips of a request that generates nothing.

        GET /models first (it also checks the API and names a default model); if the server
        has no /models, a chat request with an empty body, which it rejects before any work.
        """
        url = f"{self._base_url}/models"
        status, _, body = await self._timed("GET", url, None)  # opens the connection
        if status in (404, 405):
            if self._settings.model is None:
                raise DoctorError(
                    f"GET {url} answered {status}: not an OpenAI-compatible API at this URL "
                    "(the base URL usually ends in /v1), or pass --model"
                )
            method, url, payload = "POST", f"{self._base_url}/chat/completions", b"{}"
            label = "rejected POST /chat/completions with an empty body"
        else:
            method, payload, label = "GET", None, "GET /models"
        model = self._settings.model or _first_model(body, url)
        times = []
        for _ in range(self._settings.num_tries):
            _, headers_ms, _ = await self._timed(method, url, payload)
            times.append(headers_ms)
        return model, tuple(times), f"{label}, warm connection"

    async def _timed(self, method: str, url: str, body: bytes | None) -> tuple[int, float, bytes]:
        """Status, time to headers and body of one request that is answered at once."""
        with _translated(method, url, self._settings.request_timeout_s):
            started_s = time.perf_counter()
            async with self._session.request(method, url, data=body) as response:
                headers_ms = _ms_since(started_s)
                if response.status not in ROUND_TRIP_STATUSES:
                    await self._check(response, f"{method} {url}")
                return response.status, headers_ms, await response.read()

    async def whole(self, model: str) -> WholeTiming:
        """One non-streamed completion of the probe prompt."""
        url = f"{self._base_url}/chat/completions"
        payload = _chat_body(model, _probe_prompt(), self._settings.max_tokens, is_stream=False)
        with _translated("POST", url, self._settings.request_timeout_s):
            started_s = time.perf_counter()
            async with self._session.post(url, data=payload) as response:
                headers_ms = _ms_since(started_s)
                await self._check(response, f"POST {url}")
                body = await response.read()
                end_ms = _ms_since(started_s)
        answer = _json_object(body)
        if not isinstance(answer.get("choices"), list):
            raise DoctorError(
                f"POST {url} answered without `choices`: not an OpenAI-compatible API"
            )
        return WholeTiming(headers_ms, end_ms, completion_tokens(answer))

    async def stream(self, model: str, max_tokens: int, prompt: str | None = None) -> StreamTiming:
        """One streamed completion, with the arrival time of every text event."""
        url = f"{self._base_url}/chat/completions"
        text = prompt if prompt is not None else _probe_prompt()
        payload = _chat_body(model, text, max_tokens, is_stream=True)
        with _translated("POST", url, self._settings.request_timeout_s):
            started_s = time.perf_counter()
            async with self._session.post(url, data=payload) as response:
                headers_ms = _ms_since(started_s)
                await self._check(response, f"POST {url}")
                is_sse = response.content_type == "text/event-stream"
                reader = _StreamReader(started_s)
                async for data in response.content.iter_any():
                    reader.feed(data, is_sse)
                end_ms = _ms_since(started_s)
        arrivals, num_tokens = reader.finish(is_sse, end_ms)
        if not arrivals:
            raise DoctorError(f"POST {url} streamed no text: not an OpenAI-compatible stream")
        return StreamTiming(headers_ms, arrivals, end_ms, num_tokens, is_sse)


class _StreamReader:
    """Arrival times of text events; a body that is not SSE is kept whole and read at the end."""

    def __init__(self, started_s: float) -> None:
        self._started_s = started_s
        self._parser = SSEParser()
        self._arrivals_ms: list[float] = []
        self._num_tokens: int | None = None
        self._raw: list[bytes] = []

    def feed(self, data: bytes, is_sse: bool) -> None:
        if not is_sse:
            self._raw.append(data)
            return
        now_ms = _ms_since(self._started_s)
        for payload in self._parser.feed(data):
            self._event(payload, now_ms)

    def _event(self, payload: bytes, now_ms: float) -> None:
        if payload == DONE:
            return
        info = inspect_chunk(payload)
        if info.is_error:
            raise DoctorError(f"the stream carried an error: {_message_of(payload)}")
        if info.has_content:
            self._arrivals_ms.append(now_ms)
        if info.completion_tokens is not None:
            self._num_tokens = info.completion_tokens

    def finish(self, is_sse: bool, end_ms: float) -> tuple[tuple[float, ...], int | None]:
        if is_sse:
            for payload in self._parser.close():
                self._event(payload, end_ms)
            return tuple(self._arrivals_ms), self._num_tokens
        answer = _json_object(b"".join(self._raw))
        if not isinstance(answer.get("choices"), list):
            return (), None
        return (end_ms,), completion_tokens(answer)


def _chat_body(model: str, prompt: str, max_tokens: int, *, is_stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": is_stream,
    }
    if is_stream:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _first_model(body: bytes, url: str) -> str:
    data = _json_object(body).get("data")
    if not isinstance(data, list):
        raise DoctorError(f"GET {url} is not a model list: not an OpenAI-compatible API")
    for entry in data:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]:
            return str(entry["id"])
    raise DoctorError(f"GET {url} lists no model: pass --model")


def _message_of(body: bytes) -> str:
    """The OpenAI error message of ``body``, else its start, shortened for one line."""
    error = _json_object(body).get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        text = error["message"]
    else:
        text = body.decode("utf-8", "replace").strip() or "(empty body)"
    text = " ".join(text.split())
    if len(text) > MAX_ERROR_MESSAGE_CHARS:
        return text[:MAX_ERROR_MESSAGE_CHARS] + "..."
    return text


async def _error_message(response: aiohttp.ClientResponse) -> str:
    return _message_of(await response.content.read(MAX_ERROR_BODY_BYTES))

"""Fixed-rate mixed load for the chaos and soak benchmarks, and the answer oracle.

A request is an ``Ask``: model, question, stream or not, cache-control, and whether the
client walks away mid-stream. ``fixed_rate`` launches asks on a fixed schedule (open loop:
a slow gateway does not slow the offered load, it only builds up in-flight requests, up to
a cap beyond which asks are shed and counted) and hands every ``Outcome`` to a callback.

The simulator's text is a pure function of (model, prompt, seed), so ``expected_text``
computes, with the simulator's own code and no network, what any answer must say: an
answer that differs was served wrong, whichever tier it came from.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from hasten.simulator.config import DEFAULT_OUTPUT_TOKENS
from hasten.simulator.generation import generate_choices
from hasten.simulator.inputs import parse_chat_request

CHAT_PATH = "/v1/chat/completions"
DEFAULT_TIMEOUT_S = 30.0
MAX_IN_FLIGHT = 64
# After the schedule ends, requests still in flight get this long before they count as hung.
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Ask:
    model: str
    question: str
    stream: bool = False
    no_cache: bool = False  # skip the lookup (the answer is still stored)
    no_store: bool = False  # don't store the answer
    disconnect_after: int | None = None  # close the stream after this many SSE events
    max_tokens: int | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": self.question}],
            "temperature": 0,
            "stream": self.stream,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def headers(self) -> dict[str, str]:
        flags = (("no-cache", self.no_cache), ("no-store", self.no_store))
        directives = [directive for directive, is_on in flags if is_on]
        return {"cache-control": ", ".join(directives)} if directives else {}


@dataclass(frozen=True, slots=True)
class Outcome:
    ask: Ask
    status: int  # 0: no HTTP response at all
    text: str
    cache: str  # x-hasten-cache
    upstream: str  # x-hasten-upstream
    error: str | None  # why it failed; None: a complete answer (or an intended disconnect)
    latency_s: float

    @property
    def is_ok(self) -> bool:
        return self.error is None


def expected_text(ask: Ask, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> str:
    """The simulator's answer to ``ask`` (any simulator: the text depends on the request)."""
    choice = generate_choices(parse_chat_request(ask.body()), output_tokens, None)[0]
    return str(choice.text)


async def send(client: httpx.AsyncClient, base_url: str, ask: Ask) -> Outcome:
    """One request; never raises (a transport error or timeout is a failed Outcome)."""
    started_s = time.perf_counter()
    try:
        if ask.stream:
            status, text, cache, upstream, error = await _stream(client, base_url, ask)
        else:
            status, text, cache, upstream, error = await _whole(client, base_url, ask)
    except (httpx.HTTPError, orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        status, text, cache, upstream = 0, "", "", ""
        error = f"{type(exc).__name__}: {exc}"[:300]
    return Outcome(ask, status, text, cache, upstream, error, time.perf_counter() - started_s)


async def _whole(
    client: httpx.AsyncClient, base_url: str, ask: Ask
) -> tuple[int, str, str, str, str | None]:
    response = await client.post(base_url + CHAT_PATH, json=ask.body(), headers=ask.headers())
    cache = response.headers.get("x-hasten-cache", "")
    upstream = response.headers.get("x-hasten-upstream", "")
    if response.status_code != 200:
        return response.status_code, "", cache, upstream, f"{response.status_code}"
    content = response.json()["choices"][0]["message"]["content"]
    return 200, str(content or ""), cache, upstream, None


async def _stream(
    client: httpx.AsyncClient, base_url: str, ask: Ask
) -> tuple[int, str, str, str, str | None]:
    pieces: list[str] = []
    num_events = 0
    async with client.stream(
        "POST", base_url + CHAT_PATH, json=ask.body(), headers=ask.headers()
    ) as response:
        cache = response.headers.get("x-hasten-cache", "")
        upstream = response.headers.get("x-hasten-upstream", "")
        if response.status_code != 200:
            await response.aread()
            return response.status_code, "", cache, upstream, f"{response.status_code}"
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return 200, "".join(pieces), cache, upstream, None
            event = orjson.loads(line[6:])
            if "error" in event:
                return 200, "".join(pieces), cache, upstream, "stream error event"
            for choice in event.get("choices") or []:
                pieces.append((choice.get("delta") or {}).get("content") or "")
            num_events += 1
            if ask.disconnect_after is not None and num_events >= ask.disconnect_after:
                # Leaving the block closes the connection mid-stream: a client gone.
                return 200, "", cache, upstream, None
    return 200, "".join(pieces), cache, upstream, "stream ended without [DONE]"


@dataclass(slots=True)
class RunCounts:
    launched: int = 0
    shed: int = 0  # not sent: MAX_IN_FLIGHT requests were already waiting
    hung: int = 0  # still unanswered DRAIN_TIMEOUT_S after the schedule ended


async def fixed_rate(
    client: httpx.AsyncClient,
    base_url: str,
    next_ask: Callable[[int], Ask],
    *,
    rate_rps: float,
    duration_s: float,
    on_outcome: Callable[[Outcome], None],
    max_in_flight: int = MAX_IN_FLIGHT,
) -> RunCounts:
    """Sends ``next_ask(i)`` at ``t0 + i / rate_rps`` for ``duration_s``; bounded throughout."""
    counts = RunCounts()
    in_flight: set[asyncio.Task[None]] = set()

    async def one(ask: Ask) -> None:
        on_outcome(await send(client, base_url, ask))

    loop = asyncio.get_running_loop()
    started_s = loop.time()
    num_slots = max(1, int(rate_rps * duration_s))
    for index in range(num_slots):
        delay_s = started_s + index / rate_rps - loop.time()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        if len(in_flight) >= max_in_flight:
            counts.shed += 1
            continue
        task = asyncio.create_task(one(next_ask(index)))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        counts.launched += 1
    if in_flight:
        _, pending = await asyncio.wait(set(in_flight), timeout=DRAIN_TIMEOUT_S)
        counts.hung = len(pending)
        for task in pending:
            task.cancel()
    return counts


def new_client(timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
    return httpx.AsyncClient(timeout=timeout_s, limits=limits)

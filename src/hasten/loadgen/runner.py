"""The I/O of a load run: one aiohttp session, closed- or open-loop scheduling, measurement.

Per-request work is kept to a minimum (pre-encoded bodies, prebuilt headers, flat sample
lists) so that on a small machine the client is not what limits the measured throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterator

import aiohttp
import orjson

from hasten.loadgen.payload import encode_body, endpoint_url
from hasten.loadgen.progress import (
    MIN_REDRAW_INTERVAL_S,
    ProgressSink,
    ProgressSnapshot,
    live_percentiles_ms,
)
from hasten.loadgen.provenance import public_url
from hasten.loadgen.recorder import CACHE_HEADER, Recorder
from hasten.loadgen.report import LoadReport, build_report
from hasten.loadgen.settings import LoadSettings
from hasten.loadgen.sse import DONE, SSEParser, completion_tokens, inspect_chunk, prompt_tokens
from hasten.loadgen.workload import prompt_indices

_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class _Client:
    """Sends one pre-encoded request and records what came back."""

    def __init__(self, session: aiohttp.ClientSession, settings: LoadSettings) -> None:
        self._session = session
        self.url = endpoint_url(settings.base_url, settings.endpoint)
        self._stream = settings.stream
        headers = {"Content-Type": "application/json"}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        headers.update(settings.headers)
        self._headers = headers

    async def send(self, body: bytes, recorder: Recorder, started_s: float | None = None) -> None:
        """``started_s`` is the scheduled start in the open loop, so queueing counts as latency."""
        start_s = time.perf_counter() if started_s is None else started_s
        try:
            async with self._session.post(self.url, data=body, headers=self._headers) as response:
                if not 200 <= response.status < 300:
                    await response.read()
                    recorder.record_error(str(response.status))
                    return
                cache = response.headers.get(CACHE_HEADER)
                if self._stream:
                    await _read_stream(response, start_s, recorder, cache)
                else:
                    await _read_body(response, start_s, recorder, cache)
        except _TRANSPORT_ERRORS as exc:
            recorder.record_error(type(exc).__name__)


async def _read_body(
    response: aiohttp.ClientResponse, start_s: float, recorder: Recorder, cache: str | None
) -> None:
    raw = await response.read()
    latency_s = time.perf_counter() - start_s
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        recorder.record_error("invalid_json")
        return
    is_object = isinstance(body, dict)
    num_tokens = completion_tokens(body) if is_object else None
    num_input_tokens = prompt_tokens(body) if is_object else None
    recorder.record_ok(
        ttft_s=latency_s,
        latency_s=latency_s,
        num_tokens=num_tokens or 0,
        cache=cache,
        num_input_tokens=num_input_tokens or 0,
    )


async def _read_stream(
    response: aiohttp.ClientResponse, start_s: float, recorder: Recorder, cache: str | None
) -> None:
    parser = SSEParser()
    first_s: float | None = None
    last_s = 0.0
    num_chunks = 0
    usage_tokens: int | None = None
    input_tokens: int | None = None
    done = False
    gaps_s = recorder.gaps_s
    async for data in response.content.iter_any():
        now_s = time.perf_counter()
        for payload in parser.feed(data):
            if payload == DONE:
                done = True
                continue
            info = inspect_chunk(payload)
            if info.is_error:
                await response.release()
                recorder.record_error("stream_error")
                return
            if info.completion_tokens is not None:
                usage_tokens = info.completion_tokens
            if info.prompt_tokens is not None:
                input_tokens = info.prompt_tokens
            if info.has_content:
                if first_s is None:
                    first_s = now_s
                else:
                    gaps_s.append(now_s - last_s)
                last_s = now_s
                num_chunks += 1
    done = done or DONE in parser.close()
    if not done:
        recorder.record_error("stream_incomplete")
        return
    end_s = time.perf_counter()
    recorder.record_ok(
        ttft_s=None if first_s is None else first_s - start_s,
        latency_s=end_s - start_s,
        num_tokens=num_chunks if usage_tokens is None else usage_tokens,
        cache=cache,
        num_input_tokens=input_tokens or 0,
        is_chunk_count=usage_tokens is None,
    )


class _Plan:
    """Hands out request bodies until the count or the deadline is reached."""

    def __init__(
        self,
        bodies: _Bodies,
        *,
        num_requests: int | None,
        deadline_s: float | None,
    ) -> None:
        self._bodies = bodies
        self._num_left = num_requests
        self.deadline_s = deadline_s

    def next_body(self) -> bytes | None:
        if self._num_left is not None:
            if self._num_left <= 0:
                return None
            self._num_left -= 1
        if self.deadline_s is not None and time.perf_counter() >= self.deadline_s:
            return None
        return self._bodies.next()


class _Bodies:
    """The workload's prompt order, encoded once per unique prompt."""

    def __init__(self, settings: LoadSettings) -> None:
        self._settings = settings
        self._indices: Iterator[int] = prompt_indices(settings.workload)
        self._encoded: dict[int, bytes] = {}

    def next(self) -> bytes:
        index = next(self._indices)
        body = self._encoded.get(index)
        if body is None:
            settings = self._settings
            body = encode_body(
                settings.workload.prompt_at(index),
                endpoint=settings.endpoint,
                model=settings.model,
                stream=settings.stream,
                temperature=settings.temperature,
                max_tokens=settings.max_tokens,
                extra_body=dict(settings.extra_body),
            )
            self._encoded[index] = body
        return body


async def _closed_loop(client: _Client, plan: _Plan, recorder: Recorder, num_workers: int) -> None:
    async def worker() -> None:
        while (body := plan.next_body()) is not None:
            await client.send(body, recorder)

    await asyncio.gather(*(worker() for _ in range(num_workers)))


async def _open_loop(
    client: _Client, plan: _Plan, recorder: Recorder, settings: LoadSettings
) -> None:
    assert settings.rate_rps is not None
    rng = random.Random(settings.seed)
    mean_interval_s = 1.0 / settings.rate_rps
    in_flight: set[asyncio.Task[None]] = set()
    send_at_s = time.perf_counter()
    while True:
        if plan.deadline_s is not None and send_at_s >= plan.deadline_s:
            break
        delay_s = send_at_s - time.perf_counter()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        body = plan.next_body()
        if body is None:
            break
        task = asyncio.create_task(client.send(body, recorder, started_s=send_at_s))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        is_poisson = settings.arrival == "poisson"
        send_at_s += rng.expovariate(settings.rate_rps) if is_poisson else mean_interval_s
    if in_flight:
        await asyncio.gather(*in_flight)


async def _show_progress(
    sink: ProgressSink, recorder: Recorder, snapshot: ProgressSnapshot, start_s: float
) -> None:
    """Redraws until cancelled; reads counters only, so requests never wait on drawing."""
    while True:
        await asyncio.sleep(MIN_REDRAW_INTERVAL_S)
        sink.update(_snapshot(snapshot, recorder, start_s))


def _snapshot(template: ProgressSnapshot, recorder: Recorder, start_s: float) -> ProgressSnapshot:
    latency = live_percentiles_ms(recorder.latency_s)
    ttft = live_percentiles_ms(recorder.ttft_s)
    return ProgressSnapshot(
        phase=template.phase,
        num_done=recorder.num_done,
        num_errors=recorder.num_errors,
        num_hits=recorder.num_hits,
        elapsed_s=time.perf_counter() - start_s,
        num_planned=template.num_planned,
        duration_s=template.duration_s,
        latency_p50_ms=latency[0],
        latency_p99_ms=latency[1],
        ttft_p50_ms=ttft[0],
        ttft_p99_ms=ttft[1],
    )


async def _run_phase(
    client: _Client,
    plan: _Plan,
    settings: LoadSettings,
    progress: ProgressSink | None,
    template: ProgressSnapshot,
    *,
    open_loop: bool,
) -> Recorder:
    start_s = time.perf_counter()
    recorder = Recorder(start_s)
    drawer = None
    if progress is not None:
        drawer = asyncio.create_task(_show_progress(progress, recorder, template, start_s))
    try:
        if open_loop:
            await _open_loop(client, plan, recorder, settings)
        else:
            await _closed_loop(client, plan, recorder, settings.num_workers)
    finally:
        if drawer is not None:
            drawer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drawer
        if progress is not None:
            progress.update(_snapshot(template, recorder, start_s), final=True)
            progress.close()
    return recorder


async def run_load(settings: LoadSettings, *, progress: ProgressSink | None = None) -> LoadReport:
    """Runs the load ``settings`` describe and returns its report (warmup excluded)."""
    bodies = _Bodies(settings)
    connector = aiohttp.TCPConnector(limit=settings.connection_limit, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = _Client(session, settings)
        if settings.num_warmup:
            warmup_plan = _Plan(bodies, num_requests=settings.num_warmup, deadline_s=None)
            template = ProgressSnapshot("warmup", 0, 0, 0, 0.0, settings.num_warmup, None)
            await _run_phase(client, warmup_plan, settings, progress, template, open_loop=False)
        start_s = time.perf_counter()
        cpu_start_s = time.process_time()
        deadline_s = None if settings.duration_s is None else start_s + settings.duration_s
        plan = _Plan(bodies, num_requests=settings.num_requests, deadline_s=deadline_s)
        template = ProgressSnapshot("run", 0, 0, 0, 0.0, settings.num_requests, settings.duration_s)
        recorder = await _run_phase(
            client, plan, settings, progress, template, open_loop=settings.is_open_loop
        )
        duration_s = time.perf_counter() - start_s
        client_cpu_s = time.process_time() - cpu_start_s
    # Reports name the target without any user:password the URL carried.
    return build_report(
        settings, public_url(client.url), recorder, duration_s=duration_s, client_cpu_s=client_cpu_s
    )

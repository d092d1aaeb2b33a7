"""The engine thread: a loop of schedule → run → deliver, and a thread-safe submit/cancel API.

llama.cpp calls release the GIL, so decoding on this thread never blocks the event loop.
Tokens reach each request's asyncio queue through ``loop.call_soon_threadsafe``.
Scheduler state is guarded by one lock, held only while planning and bookkeeping, never
during a decode. Cancelling a running request takes effect between two steps: the cells
of the step in flight must land before its slot can be handed to someone else.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hasten.config.local import EngineConfig, default_model_path
from hasten.errors import DecodeError, EngineQueueFull, QueueFull
from hasten.local.model import ContextParams, LocalModel
from hasten.local.runner import DECODE_NO_KV_SLOT, Runner
from hasten.local.sampling import SamplingParams, TokenSampler
from hasten.local.scheduler import Scheduler, Status, StepPlan
from hasten.local.scheduler import Sequence as SchedSequence
from hasten.local.textstream import TextStream
from hasten.local.threads import ThreadTuner

_log = logging.getLogger(__name__)
_IDLE_WAIT_S = 0.5
_SERVICE_EMA_WEIGHT = 0.2


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """New text of one request; the last event has a ``finish_reason`` or an ``error``."""

    text: str = ""
    num_tokens: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None
    error: str | None = None

    @property
    def is_final(self) -> bool:
        return self.finish_reason is not None or self.error is not None


@dataclass(eq=False, slots=True)
class _Request:
    sequence: SchedSequence
    sampler: TokenSampler
    text: TextStream
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[StreamEvent]
    submitted_s: float = field(default_factory=time.monotonic)


class Generation:
    """Async iterator of a request's ``StreamEvent``s; ``cancel`` frees its slot."""

    def __init__(self, engine: Engine, request: _Request) -> None:
        self._engine = engine
        self._request = request
        self._is_done = False

    @property
    def request_id(self) -> int:
        return self._request.sequence.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self._request.sequence.prompt_ids)

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._is_done:
            raise StopAsyncIteration
        event = await self._request.queue.get()
        self._is_done = event.is_final
        return event

    def cancel(self) -> None:
        if not self._is_done:
            self._is_done = True
            self._engine.cancel(self.request_id)


class Engine:
    """Continuous batching over one llama.cpp context. ``start`` it, then ``submit``."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config.resolved().check()
        self.model = LocalModel(self.config.model_path or default_model_path())
        self.scheduler = Scheduler(
            max_seqs=self.config.max_seqs,
            max_queue=self.config.max_queue,
            max_kv_tokens=self.config.n_ctx,
            max_step_tokens=self.config.max_step_tokens,
            num_cache_slots=self.config.num_cache_slots,
        )
        params = ContextParams(
            n_ctx=self.config.n_ctx,
            n_seq_max=self.scheduler.num_slots,
            n_batch=self.config.max_step_tokens,
            n_threads=self.config.n_threads,
            n_threads_single_token=min(self.config.n_threads_single_token, self.config.n_threads),
        )
        self.runner = Runner(self.model, params)
        self.threads = ThreadTuner(
            max_threads=params.n_threads,
            single_token_threads=params.n_threads_single_token,
            probe_every_steps=self.config.thread_probe_steps,
        )
        self._lock = threading.Condition()
        self._requests: dict[int, _Request] = {}
        self._cancelled: set[int] = set()
        self._ids = itertools.count(1)
        self._is_stopping = False
        self._service_ema_s = 1.0
        self.num_steps = 0
        self.num_decoded_tokens = 0
        self._thread = threading.Thread(target=self._run, name="hasten-local-engine", daemon=True)

    def start(self) -> Engine:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._is_stopping = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            for request in list(self._requests.values()):
                self._finish(request, StreamEvent(error="engine stopped"))
        self.runner.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit_chat(
        self, messages: Sequence[Mapping[str, Any]], params: SamplingParams
    ) -> Generation:
        return self.submit(self.model.tokenize(self.model.render_chat(messages)), params)

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        """Queues a request; raises ``EngineQueueFull`` or ``ContextTooLong``."""
        if not prompt_ids:
            raise ValueError("empty prompt")
        loop = asyncio.get_running_loop()
        max_new = params.max_tokens
        if max_new is None:
            max_new = max(
                1, min(self.config.default_max_tokens, self.config.n_ctx - len(prompt_ids))
            )
        sequence = SchedSequence(next(self._ids), prompt_ids, max_new)
        request = _Request(
            sequence,
            TokenSampler.from_params(params),
            TextStream(params.stop),
            loop,
            asyncio.Queue(),
        )
        with self._lock:
            try:
                self.scheduler.add(sequence)
            except QueueFull as exc:
                raise EngineQueueFull(str(exc), self._retry_after_s()) from exc
            self._requests[sequence.request_id] = request
            self._lock.notify_all()
        return Generation(self, request)

    def cancel(self, request_id: int) -> None:
        with self._lock:
            request = self._requests.get(request_id)
            if request is None:
                return
            if request.sequence.status is Status.WAITING:
                self._finish(request, StreamEvent(finish_reason="cancelled"))
            else:
                self._cancelled.add(request_id)
                self._lock.notify_all()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "num_running": len(self.scheduler.running),
                "num_waiting": len(self.scheduler.waiting),
                "used_kv_tokens": self.scheduler.used_kv_tokens(),
                "num_steps": self.num_steps,
                "num_decoded_tokens": self.num_decoded_tokens,
            }

    def _retry_after_s(self) -> float:
        backlog = len(self.scheduler.waiting) + len(self.scheduler.running)
        return max(1.0, math.ceil(self._service_ema_s * backlog / self.config.max_seqs))

    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception:
                # A bug must not leave every client waiting forever on a dead thread.
                _log.exception("local engine step failed")
                with self._lock:
                    self.runner.clear()
                    self.scheduler.forget_kv()
                    for request in list(self._requests.values()):
                        self._finish(request, StreamEvent(error="local engine failure"))

    def _step(self) -> bool:
        """One schedule → run → deliver round; False once the engine stops."""
        with self._lock:
            plan = self._next_plan()
            if plan is None:
                return False
            samplers = {
                seq.request_id: self._requests[seq.request_id].sampler
                for seq in self.scheduler.running
            }
        num_tokens = sum(len(chunk.token_ids) for chunk in plan.chunks)
        is_splittable = num_tokens == len(plan.chunks)
        mode = self.threads.choose(num_tokens, is_splittable)
        try:
            result = self.runner.execute(plan, samplers, mode)
        except DecodeError as exc:
            with self._lock:
                self._recover(plan, exc)
            return True
        self.threads.record(num_tokens, is_splittable, mode, result.elapsed_s)
        with self._lock:
            self.scheduler.complete(plan)
            self.num_steps += 1
            for sequence, token_id in result.sampled:
                request = self._requests.get(sequence.request_id)
                if request is not None:
                    self._on_token(request, token_id)
        return True

    def _next_plan(self) -> StepPlan | None:
        """Waits (lock held) until there is work; None when the engine stops."""
        while not self._is_stopping:
            for request_id in self._cancelled:
                request = self._requests.get(request_id)
                if request is not None:
                    self._finish(request, StreamEvent(finish_reason="cancelled"))
            self._cancelled.clear()
            plan = self.scheduler.schedule()
            if plan.chunks:
                return plan
            if plan.kv_ops:
                self.runner.execute(plan, {})
            self._lock.wait(_IDLE_WAIT_S)
        return None

    def _on_token(self, request: _Request, token_id: int) -> None:
        sequence = request.sequence
        self.num_decoded_tokens += 1
        if token_id in self.model.eog_ids:
            self._finish(request, StreamEvent(request.text.finish(), finish_reason="stop"))
            return
        sequence.token_ids.append(token_id)
        delta = request.text.feed(self.model.token_bytes(token_id))
        if delta.is_stopped:
            self._finish(request, StreamEvent(delta.text, 1, finish_reason="stop"))
        elif sequence.num_generated >= sequence.max_new_tokens:
            text = delta.text + request.text.finish()
            self._finish(request, StreamEvent(text, 1, finish_reason="length"))
        else:
            self._deliver(request, StreamEvent(delta.text, 1))

    def _finish(self, request: _Request, event: StreamEvent) -> None:
        sequence = request.sequence
        self.scheduler.finish(sequence)
        self._requests.pop(sequence.request_id, None)
        usage = Usage(len(sequence.prompt_ids), sequence.num_generated, sequence.num_reused)
        elapsed_s = time.monotonic() - request.submitted_s
        self._service_ema_s += _SERVICE_EMA_WEIGHT * (elapsed_s - self._service_ema_s)
        self._deliver(
            request,
            StreamEvent(event.text, event.num_tokens, event.finish_reason, usage, event.error),
        )

    def _deliver(self, request: _Request, event: StreamEvent) -> None:
        try:
            request.loop.call_soon_threadsafe(request.queue.put_nowait, event)
        except RuntimeError:
            # The submitter's event loop is closed: nobody is listening any more.
            if not event.is_final:
                self._cancelled.add(request.sequence.request_id)

    def _recover(self, plan: StepPlan, error: DecodeError) -> None:
        """A failed decode: make room and retry, or fail the step's requests."""
        if error.code == DECODE_NO_KV_SLOT and self.scheduler.evict_free_caches():
            return  # nothing was committed; the same chunks are planned again
        self.runner.clear()
        self.scheduler.forget_kv()
        for chunk in plan.chunks:
            request = self._requests.get(chunk.sequence.request_id)
            if request is not None:
                self._finish(request, StreamEvent(error=str(error)))

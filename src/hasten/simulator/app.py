"""The simulator's ASGI app: routing and the OpenAI endpoints.

Pure ASGI, no framework: the hot path is a dict lookup, one orjson parse, a hash-based word
generator and a couple of sends. See the package docstring for endpoints and headers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from hasten.apis import messages, responses
from hasten.apis.usage import Usage
from hasten.errors import (
    ClientGone,
    HastenError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
)
from hasten.proxy.validation import parse_body
from hasten.simulator.config import SimConfig
from hasten.simulator.control import ControlEndpoints
from hasten.simulator.execution import (
    SIMULATED_500_MESSAGE,
    WHOLE_BODY_FAULTS,
    StreamRun,
    send_faulty_whole,
    send_whole,
    stall,
    wait_until_due,
)
from hasten.simulator.faults import STALLS, Fault, FaultKind, burst_fault, decide_fault
from hasten.simulator.generation import GeneratedChoice, generate_choices, target_num_tokens
from hasten.simulator.inputs import (
    MAX_BODY_BYTES,
    GenerationRequest,
    Overrides,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
    parse_overrides,
    with_tool_calls_capped,
)
from hasten.simulator.latency import ZERO_LATENCY_PLAN, LatencyPlan, plan_latency
from hasten.simulator.native import (
    MESSAGES,
    RESPONSES,
    NativeRequest,
    NativeStream,
    chat_usage,
    matched_stop,
    messages_prompt,
    num_opening_events,
    parse_messages,
    parse_responses,
    whole_body,
)
from hasten.simulator.payloads import (
    RATE_LIMITED_MESSAGE,
    ChatStreamEncoder,
    CompletionStreamEncoder,
    chat_completion_body,
    embeddings_body,
    model_dict,
    models_body,
    rate_limit_error,
    text_completion_body,
    usage_dict,
)
from hasten.simulator.state import SimState
from hasten.simulator.stats import Outcome
from hasten.simulator.streaming import stream_schedule
from hasten.simulator.textgen import embedding_vector, text_tokens
from hasten.wire.asgi import (
    DisconnectWatcher,
    Receive,
    Scope,
    Send,
    accept_lifespan,
    error_headers,
    read_body,
    send_error,
    send_json,
)

Handler = Callable[[Scope, Receive, Send, float], Awaitable[Outcome]]
RequestParser = Callable[[dict[str, object]], GenerationRequest]

API_PREFIX = "/v1/"
MODEL_PATH_PREFIX = "/v1/models/"
RESPONSE_PATH_PREFIX = "/v1/responses/"
INPUT_ITEMS_SUFFIX = "/input_items"
# Endpoints that answer errors in Anthropic's shape ({"type": "error", "error": {...}}).
ANTHROPIC_ENDPOINTS = frozenset({"messages", "messages.count_tokens"})


@dataclass(frozen=True, slots=True)
class PreparedCompletion:
    """Everything decided about one chat/text completion before any byte is sent."""

    request: GenerationRequest
    is_chat: bool
    choices: list[GeneratedChoice]
    plan: LatencyPlan
    fault: Fault
    usage: dict[str, object]

    @property
    def num_steps(self) -> int:
        return max((len(choice.pieces) for choice in self.choices), default=0)


@dataclass(frozen=True, slots=True)
class PreparedNative:
    """A Responses or Messages answer decided: the chat completion it is built from, its
    token counts (cache reads and writes included) and the stop sequence that ended it."""

    native: NativeRequest
    completion: PreparedCompletion
    usage: Usage
    stop_sequence: str | None


class SimulatorApp:
    """An OpenAI-compatible upstream with a configurable latency and fault model."""

    def __init__(self, config: SimConfig) -> None:
        self.state = SimState(config)
        self.control = ControlEndpoints(self.state)
        # path -> (endpoint name counted in stats, or None for control paths; method -> handler)
        self._routes: dict[str, tuple[str | None, dict[str, Handler]]] = {
            "/v1/chat/completions": ("chat.completions", {"POST": self._chat}),
            "/v1/completions": ("completions", {"POST": self._completions}),
            "/v1/embeddings": ("embeddings", {"POST": self._embeddings}),
            "/v1/responses": ("responses", {"POST": self._responses}),
            "/v1/messages": ("messages", {"POST": self._messages}),
            "/v1/messages/count_tokens": ("messages.count_tokens", {"POST": self._count_tokens}),
            "/v1/models": ("models", {"GET": self._models}),
            "/sim/stats": (None, {"GET": self.control.get_stats}),
            "/sim/reset": (None, {"POST": self.control.reset}),
            "/sim/burst": (None, {"POST": self.control.burst}),
            "/sim/config": (
                None,
                {"GET": self.control.get_config, "POST": self.control.set_config},
            ),
        }

    @property
    def config(self) -> SimConfig:
        return self.state.config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await accept_lifespan(receive, send)

    def _canonical_path(self, path: str) -> str:
        """Every API path also answers without its ``/v1``, as the gateway's do."""
        if path.startswith((API_PREFIX, "/sim/")):
            return path
        prefixed = "/v1" + path
        if prefixed in self._routes or prefixed.startswith(
            (MODEL_PATH_PREFIX, RESPONSE_PATH_PREFIX)
        ):
            return prefixed
        return path

    def _route(self, path: str, method: str) -> tuple[str | None, Handler]:
        route = self._routes.get(path)
        if route is None:
            if path.startswith(MODEL_PATH_PREFIX):
                route = ("models", {"GET": self._model})
            elif path.startswith(RESPONSE_PATH_PREFIX) and path.endswith(INPUT_ITEMS_SUFFIX):
                route = ("responses", {"GET": self._input_items})
            elif path.startswith(RESPONSE_PATH_PREFIX):
                route = ("responses", {"GET": self._get_response, "DELETE": self._delete_response})
            else:
                return ("other" if path.startswith(API_PREFIX) else None), _not_found
        endpoint, methods = route
        handler = methods.get(method)
        if handler is None:
            return endpoint, functools.partial(_method_not_allowed, allow=", ".join(methods))
        return endpoint, handler

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        start_s = asyncio.get_running_loop().time()
        path = self._canonical_path(scope["path"])
        if path != scope["path"]:
            scope = {**scope, "path": path}
        endpoint, handler = self._route(path, scope["method"])
        stats = self.state.stats
        if endpoint is not None:
            stats.record_request(endpoint)
        # Anything that ends a request without a verdict (server shutdown) counts as cancelled.
        outcome = Outcome.CANCELLED
        try:
            outcome = await handler(scope, receive, send, start_s)
        except HastenError as error:
            outcome = Outcome.BAD_REQUEST
            try:
                if endpoint is not None:
                    await self._network_delay(receive, start_s)
                if endpoint in ANTHROPIC_ENDPOINTS:
                    body = messages.error_body(error.status_code, error.message)
                    await send_json(send, error.status_code, body, error_headers(error))
                else:
                    await send_error(send, error)
            except ClientGone:
                outcome = Outcome.CANCELLED
        except ClientGone:
            outcome = Outcome.CANCELLED
        finally:
            if endpoint is not None:
                stats.record_outcome(outcome)

    async def _network_delay(self, receive: Receive, start_s: float) -> None:
        """One round trip before a /v1 answer that has no latency plan (models, errors).

        A real network delays every response, not only completions; without this a client
        (``hasten doctor``, the router's /models probe) could not see the RTT apart from the
        TTFT. Not jittered, so it draws nothing from the seeded RNG.
        """
        rtt_ms = self.state.config.rtt_ms
        if rtt_ms > 0:
            with DisconnectWatcher(receive, is_armed=False) as watcher:
                await wait_until_due(watcher, start_s, rtt_ms)

    def _check_model(self, model: str) -> None:
        config = self.state.config
        if config.strict_models and model not in config.models:
            raise ModelNotFound(f"The model `{model}` does not exist", param="model")

    def _decide_fault(self, overrides: Overrides, num_tokens: int) -> Fault:
        burst_status = self.state.take_burst()
        if burst_status is not None:
            return burst_fault(burst_status)
        return decide_fault(
            self.state.config,
            self.state.rng,
            num_tokens=num_tokens,
            forced_kind=overrides.fail,
            forced_after_chunks=overrides.fail_after_chunks,
            forced_retry_after_s=overrides.retry_after_s,
        )

    def _plan(self, overrides: Overrides, num_prompt_tokens: int, num_cached: int) -> LatencyPlan:
        config = self.state.config
        if (
            not config.has_latency
            and overrides.first_token_ms is None
            and overrides.decode_ms is None
        ):
            return ZERO_LATENCY_PLAN  # skip RNG draws: nothing would be slowed anyway
        plan = plan_latency(
            config,
            self.state.latency_rng(overrides.trace),
            num_prompt_tokens,
            num_cached,
            first_token_override_ms=overrides.first_token_ms,
            decode_override_ms=overrides.decode_ms,
        )
        self.state.stats.num_stragglers += plan.is_straggler
        return plan

    async def _send_fault(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        fault: Fault,
        *,
        is_anthropic: bool = False,
    ) -> Outcome:
        """An up-front 429 or 5xx (a burst's status), after one network round trip, in the
        API's error shape (Anthropic's types follow the status: 529 is overloaded_error)."""
        await wait_until_due(watcher, start_s, self.state.config.rtt_ms)
        if fault.kind is FaultKind.RATE_LIMIT:
            error = rate_limit_error(fault.retry_after_s)
            if is_anthropic:
                body = messages.error_body(429, RATE_LIMITED_MESSAGE)
                await send_json(send, 429, body, error_headers(error))
            else:
                await send_error(send, error)
            return Outcome.RATE_LIMITED
        if is_anthropic:
            body = messages.error_body(fault.status, SIMULATED_500_MESSAGE)
        else:
            body = HastenError(SIMULATED_500_MESSAGE).to_json()
        await send_json(send, fault.status, body)
        return Outcome.SERVER_ERROR

    # --- chat and text completions -------------------------------------------------------

    async def _chat(self, scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
        return await self._generate(scope, receive, send, start_s, parse_chat_request)

    async def _completions(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        return await self._generate(scope, receive, send, start_s, parse_completion_request)

    def _prepare(
        self, request: GenerationRequest, overrides: Overrides, is_chat: bool
    ) -> PreparedCompletion:
        """Generates the text, decides the fault and, unless it fails up front, the pacing."""
        state = self.state
        config = state.config
        request = with_tool_calls_capped(request, config.max_tool_calls)
        forced = overrides.num_tokens
        if forced is None and not config.runs_to_max_tokens:
            forced = config.output_tokens  # max_tokens only caps it
        choices = generate_choices(request, config.output_tokens, forced)
        num_completion_tokens = sum(len(choice.pieces) for choice in choices)
        num_steps = max(len(choice.pieces) for choice in choices)
        fault = self._decide_fault(overrides, num_steps)
        if _fails_up_front(fault, request.stream):
            return PreparedCompletion(request, is_chat, choices, ZERO_LATENCY_PLAN, fault, {})
        num_prompt_tokens = len(request.prompt_tokens)
        num_cached = state.prefix_cache.lookup_and_insert(request.model, request.prompt_tokens)
        state.stats.num_prompt_tokens += num_prompt_tokens
        state.stats.num_prefix_cache_hit_tokens += num_cached
        plan = self._plan(overrides, num_prompt_tokens, num_cached)
        usage = usage_dict(num_prompt_tokens, num_completion_tokens, num_cached)
        return PreparedCompletion(request, is_chat, choices, plan, fault, usage)

    async def _generate(
        self, scope: Scope, receive: Receive, send: Send, start_s: float, parse: RequestParser
    ) -> Outcome:
        overrides = parse_overrides(scope["headers"])
        request = parse(parse_body(await read_body(receive, scope, MAX_BODY_BYTES)))
        self._check_model(request.model)
        if request.stream:
            self.state.stats.num_stream_requests += 1
        prepared = self._prepare(request, overrides, is_chat=parse is parse_chat_request)
        if prepared.fault.kind in STALLS:
            return await stall(send, receive, start_s, prepared.fault, request.stream)
        with DisconnectWatcher(receive, is_armed=False) as watcher:
            if _fails_up_front(prepared.fault, request.stream):
                return await self._send_fault(send, watcher, start_s, prepared.fault)
            if request.stream:
                return await self._stream(send, watcher, start_s, prepared)
            return await self._respond_whole(send, watcher, start_s, prepared)

    async def _stream(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        prepared: PreparedCompletion,
    ) -> Outcome:
        state = self.state
        request = prepared.request
        is_chat = prepared.is_chat
        encoder_type = ChatStreamEncoder if is_chat else CompletionStreamEncoder
        encoder = encoder_type(
            state.next_id("chatcmpl" if is_chat else "cmpl"),
            int(time.time()),
            request.model,
            request.include_usage,
            request.num_choices,
        )
        usage = prepared.usage if request.include_usage else None
        events = stream_schedule(encoder, prepared.choices, prepared.plan, usage)
        run = StreamRun(send, watcher, start_s)
        try:
            return await run.run(events, prepared.fault)
        finally:
            state.stats.num_completion_tokens += run.num_tokens_sent

    async def _respond_whole(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        prepared: PreparedCompletion,
    ) -> Outcome:
        state = self.state
        is_chat = prepared.is_chat
        build_body = chat_completion_body if is_chat else text_completion_body
        body = build_body(
            state.next_id("chatcmpl" if is_chat else "cmpl"),
            int(time.time()),
            prepared.request.model,
            prepared.choices,
            prepared.usage,
        )
        due_ms = prepared.plan.total_ms(prepared.num_steps)
        kind = prepared.fault.kind
        if kind in WHOLE_BODY_FAULTS:
            return await send_faulty_whole(send, watcher, start_s, due_ms, body, kind)
        await send_whole(send, watcher, start_s, due_ms, body)
        state.stats.num_completion_tokens += sum(len(c.pieces) for c in prepared.choices)
        return Outcome.COMPLETED

    # --- the Responses and Messages APIs -------------------------------------------------

    async def _responses(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        overrides = parse_overrides(scope["headers"])
        body = parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        responses.check_request(body)
        if body.get("background") is True:
            raise InvalidRequest(
                "The simulator does not run responses in the background.",
                param="background",
                code="unsupported_parameter",
            )
        history: list[Any] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            stored = self.state.responses.get(previous)
            if stored is None:
                raise InvalidRequest(
                    f"Previous response with id '{previous}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            history = stored.history()
        self._check_model(body["model"])
        native = parse_responses(body, history)
        return await self._serve_native(native, overrides, receive, send, start_s)

    async def _messages(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        overrides = parse_overrides(scope["headers"])
        body = parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        messages.check_request(body)
        self._check_model(body["model"])
        native = parse_messages(body)
        return await self._serve_native(native, overrides, receive, send, start_s)

    def _prepare_native(self, native: NativeRequest, overrides: Overrides) -> PreparedNative:
        """As ``_prepare``, with the length capped by the request's limit rather than run to
        it, fault positions counted in the API's events, and the API's prefix cache."""
        state = self.state
        config = state.config
        request = with_tool_calls_capped(native.generation, config.max_tool_calls)
        forced = overrides.num_tokens if overrides.num_tokens is not None else config.output_tokens
        choices = generate_choices(request, config.output_tokens, forced)
        num_steps = len(choices[0].pieces)
        fault = self._decide_fault(overrides, num_steps)
        if fault.after_chunks is not None and overrides.fail_after_chunks is None:
            after = num_opening_events(native.api, choices[0]) + num_steps // 2
            fault = dataclasses.replace(fault, after_chunks=after)
        num_tokens = target_num_tokens(config.output_tokens, request.max_tokens, forced)[0]
        stop = matched_stop(request, num_tokens) if choices[0].finish_reason == "stop" else None
        if _fails_up_front(fault, request.stream):
            completion = PreparedCompletion(request, True, choices, ZERO_LATENCY_PLAN, fault, {})
            return PreparedNative(native, completion, Usage(0, 0), stop)
        num_prompt = len(native.prompt_tokens)
        if native.api == MESSAGES:
            read, written = state.breakpoint_cache.lookup_and_write(
                native.cache_namespace, native.prompt_tokens, native.boundaries, native.breakpoints
            )
        else:
            read = state.prefix_cache.lookup_and_insert(
                native.cache_namespace, native.prompt_tokens
            )
            written = 0
        state.stats.num_prompt_tokens += num_prompt
        state.stats.num_prefix_cache_hit_tokens += read
        plan = self._plan(overrides, num_prompt, read)
        num_completion = len(choices[0].pieces)
        usage = chat_usage(num_prompt, num_completion, read, written)
        completion = PreparedCompletion(request, True, choices, plan, fault, usage)
        return PreparedNative(
            native, completion, Usage(num_prompt, num_completion, read, written), stop
        )

    async def _serve_native(
        self,
        native: NativeRequest,
        overrides: Overrides,
        receive: Receive,
        send: Send,
        start_s: float,
    ) -> Outcome:
        request = native.generation
        if request.stream:
            self.state.stats.num_stream_requests += 1
        prepared = self._prepare_native(native, overrides)
        fault = prepared.completion.fault
        if fault.kind in STALLS:
            return await stall(send, receive, start_s, fault, request.stream)
        with DisconnectWatcher(receive, is_armed=False) as watcher:
            if _fails_up_front(fault, request.stream):
                is_anthropic = native.api == MESSAGES
                return await self._send_fault(
                    send, watcher, start_s, fault, is_anthropic=is_anthropic
                )
            if native.api == RESPONSES:
                answer_id = self.state.next_response_id()
            else:
                answer_id = self.state.next_message_id()
            if request.stream:
                return await self._native_stream(send, watcher, start_s, prepared, answer_id)
            return await self._native_whole(send, watcher, start_s, prepared, answer_id)

    def _store(self, native: NativeRequest, response: dict[str, Any]) -> None:
        if native.api == RESPONSES and native.body.get("store") is not False:
            self.state.responses.put(response, list(native.input_items))

    async def _native_stream(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        prepared: PreparedNative,
        answer_id: str,
    ) -> Outcome:
        completion = prepared.completion
        request = completion.request
        encoder = ChatStreamEncoder(
            self.state.next_id("chatcmpl"), int(time.time()), request.model, True, 1
        )
        chat_events = stream_schedule(
            encoder, completion.choices, completion.plan, completion.usage
        )
        native = prepared.native
        stream = NativeStream(
            native,
            response_id=answer_id,
            created_at=int(time.time()),
            stop_sequence=prepared.stop_sequence,
            usage=prepared.usage,
            on_complete=functools.partial(self._store, native),
        )
        # The typed streams open (response.created, message_start) once the request is in,
        # a round trip after it was sent; the answer's tokens follow on the plan.
        opening_ms = min(self.state.config.rtt_ms, completion.plan.first_token_ms)
        events = stream.schedule(chat_events, opening_ms)
        run = StreamRun(send, watcher, start_s, stream.wire)
        try:
            return await run.run(events, completion.fault)
        finally:
            self.state.stats.num_completion_tokens += run.num_tokens_sent

    async def _native_whole(
        self,
        send: Send,
        watcher: DisconnectWatcher,
        start_s: float,
        prepared: PreparedNative,
        answer_id: str,
    ) -> Outcome:
        completion = prepared.completion
        created = int(time.time())
        chat_body = chat_completion_body(
            self.state.next_id("chatcmpl"),
            created,
            completion.request.model,
            completion.choices,
            completion.usage,
        )
        answer = whole_body(
            prepared.native,
            chat_body,
            response_id=answer_id,
            created_at=created,
            stop_sequence=prepared.stop_sequence,
        )
        body = orjson.dumps(answer)
        due_ms = completion.plan.total_ms(completion.num_steps)
        kind = completion.fault.kind
        if kind in WHOLE_BODY_FAULTS:
            return await send_faulty_whole(send, watcher, start_s, due_ms, body, kind)
        self._store(prepared.native, answer)
        await send_whole(send, watcher, start_s, due_ms, body)
        self.state.stats.num_completion_tokens += len(completion.choices[0].pieces)
        return Outcome.COMPLETED

    async def _count_tokens(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        """The prompt's tokens as the simulator counts them for usage (a Messages answer to
        the same request reports these as its input)."""
        overrides = parse_overrides(scope["headers"])
        body = parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        messages.check_count_request(body)
        self._check_model(body["model"])
        fault = self._decide_fault(overrides, 0)
        if fault.kind in STALLS:
            return await stall(send, receive, start_s, fault, False)
        with DisconnectWatcher(receive, is_armed=False) as watcher:
            if _fails_up_front(fault, False):
                return await self._send_fault(send, watcher, start_s, fault, is_anthropic=True)
            count = orjson.dumps({"input_tokens": len(messages_prompt(body).tokens)})
            if fault.kind in WHOLE_BODY_FAULTS:
                rtt_ms = self.state.config.rtt_ms
                return await send_faulty_whole(send, watcher, start_s, rtt_ms, count, fault.kind)
            await send_whole(send, watcher, start_s, self.state.config.rtt_ms, count)
            return Outcome.COMPLETED

    def _stored(self, scope: Scope) -> tuple[str, Any]:
        path = scope["path"]
        response_id = path.split("/responses/", 1)[1].removesuffix(INPUT_ITEMS_SUFFIX)
        stored = self.state.responses.get(response_id)
        if stored is None:
            raise NotFound(f"No response found with id '{response_id}'.", code=None)
        return response_id, stored

    async def _get_response(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        _, stored = self._stored(scope)
        await self._network_delay(receive, start_s)
        await send_json(send, 200, orjson.dumps(stored.response))
        return Outcome.COMPLETED

    async def _delete_response(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        response_id, _ = self._stored(scope)
        self.state.responses.delete(response_id)
        await self._network_delay(receive, start_s)
        body = {"id": response_id, "object": "response", "deleted": True}
        await send_json(send, 200, orjson.dumps(body))
        return Outcome.COMPLETED

    async def _input_items(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        _, stored = self._stored(scope)
        items = list(reversed(stored.input_items))  # OpenAI lists the newest first
        ids = [item.get("id") for item in items if isinstance(item, dict)]
        body = {
            "object": "list",
            "data": items,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
            "has_more": False,
        }
        await self._network_delay(receive, start_s)
        await send_json(send, 200, orjson.dumps(body))
        return Outcome.COMPLETED

    # --- embeddings and models -----------------------------------------------------------

    async def _embeddings(
        self, scope: Scope, receive: Receive, send: Send, start_s: float
    ) -> Outcome:
        overrides = parse_overrides(scope["headers"])
        request = parse_embedding_request(
            parse_body(await read_body(receive, scope, MAX_BODY_BYTES))
        )
        self._check_model(request.model)
        state = self.state
        num_tokens = sum(len(text_tokens(text)) for text in request.texts)
        fault = self._decide_fault(overrides, 0)
        if fault.kind in STALLS:
            return await stall(send, receive, start_s, fault, False)
        with DisconnectWatcher(receive, is_armed=False) as watcher:
            if _fails_up_front(fault, False):
                return await self._send_fault(send, watcher, start_s, fault)
            num_dims = request.num_dims or state.config.embedding_dims
            vectors = [embedding_vector(request.model, text, num_dims) for text in request.texts]
            body = embeddings_body(request.model, vectors, request.encoding_format, num_tokens)
            state.stats.num_embedding_inputs += len(request.texts)
            state.stats.num_embedding_tokens += num_tokens
            # An embedding is a prefill with no decode: its latency is the time to first token.
            due_ms = self._plan(overrides, num_tokens, 0).first_token_ms
            if fault.kind in WHOLE_BODY_FAULTS:
                return await send_faulty_whole(send, watcher, start_s, due_ms, body, fault.kind)
            await send_whole(send, watcher, start_s, due_ms, body)
            return Outcome.COMPLETED

    async def _models(self, scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
        await self._network_delay(receive, start_s)
        await send_json(send, 200, models_body(self.state.config.models))
        return Outcome.COMPLETED

    async def _model(self, scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
        model = scope["path"][len(MODEL_PATH_PREFIX) :]
        config = self.state.config
        if model not in config.models and (config.strict_models or not model):
            raise ModelNotFound(f"The model `{model}` does not exist", param="model")
        await self._network_delay(receive, start_s)
        await send_json(send, 200, orjson.dumps(model_dict(model)))
        return Outcome.COMPLETED


def _fails_up_front(fault: Fault, stream: bool) -> bool:
    """429s always come first; a 500 does unless a stream is told to fail after N chunks."""
    if fault.kind is FaultKind.RATE_LIMIT:
        return True
    return fault.kind is FaultKind.SERVER_ERROR and (fault.after_chunks is None or not stream)


async def _not_found(scope: Scope, receive: Receive, send: Send, start_s: float) -> Outcome:
    raise NotFound(f"Unknown path {scope['path']}")


async def _method_not_allowed(
    scope: Scope, receive: Receive, send: Send, start_s: float, *, allow: str
) -> Outcome:
    raise MethodNotAllowed(f"Method {scope['method']} not allowed on {scope['path']}", allow=allow)

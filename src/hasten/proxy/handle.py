"""The completion path: validate, look up the cache, coalesce, call upstream, stream back.

Three ways a request can be answered, chosen per request:
- ``hit``: from the tiered cache, replayed as a stream or one JSON body as asked;
- ``miss``: through a coalesced flight, recorded and stored when complete;
- ``bypass``: not cacheable, so forwarded directly with nothing recorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hasten.apis.api import Api
from hasten.cache import (
    CachedAnswer,
    CacheDecision,
    ModelCachePolicy,
    decide,
    namespaced_key,
    parse_cache_control,
    replay,
    request_key,
    with_headers,
)
from hasten.errors import ClientGone, HastenError
from hasten.proxy.assemble import Assembly, assemble, is_assembled
from hasten.proxy.exchange import Exchange
from hasten.proxy.flight import DirectFlight, Flight
from hasten.proxy.fronts import Front
from hasten.proxy.headers import (
    answer_headers,
    assembled_headers,
    response_headers,
    upstream_headers,
)
from hasten.proxy.outcome import answer_saved, emit_outcome, hedge_saved
from hasten.proxy.pipeline import Pipeline
from hasten.proxy.ports import NO_LIMIT, POLICY_HEADER, EarlyAsk, FleetJob, Spent
from hasten.proxy.recorder import Recorder
from hasten.proxy.resumer import StreamResume, resume_header
from hasten.proxy.spans import describe_answer, describe_cached, describe_request
from hasten.proxy.track import ResponseTrack
from hasten.proxy.validation import check_num_items, off_loop, parse_body
from hasten.routing.hybrid import decide_hybrid, route_name
from hasten.routing.models import ResolvedModel
from hasten.upstream.bridge import ClientRequest
from hasten.upstream.client import UpstreamCall
from hasten.upstream.integrity import EventSink
from hasten.values.caller import Caller, check_model
from hasten.values.outcome import BYPASS, COALESCED, HIT, MISS, OBSERVED_SCOPE_KEY, SEMANTIC
from hasten.values.usage import usage_marks
from hasten.wire import exactjson
from hasten.wire.asgi import (
    JSON_CONTENT_TYPE,
    SSE_HEADERS,
    DisconnectWatcher,
    Headers,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    send_body,
    send_response,
    start_stream,
)

_log = logging.getLogger("hasten.proxy")

_EMBEDDING_POLICY = ModelCachePolicy(is_deterministic_only=False)
_COALESCED_LABEL = COALESCED.encode()
# Per-request facts the JSON access record shows (hasten.app), kept in the ASGI scope.
TENANT_SCOPE_KEY = "hasten.tenant"
MODEL_SCOPE_KEY = "hasten.model"
API_SCOPE_KEY = "hasten.api"


async def handle(
    pipe: Pipeline,
    api: Api,
    scope: Scope,
    receive: Receive,
    send: Send,
    request_id: str,
) -> None:
    """Serves one model request (in any client API) end to end."""
    started_s = time.perf_counter()
    with pipe.tracer.start_request(scope, api.name, request_id) as trace:
        ex = await _exchange(pipe, api, scope, receive, send, request_id, started_s)
        ex.trace = trace
        describe_request(trace, api.name, ex.body)
        ex.limit = pipe.limits.open(ex)
        with DisconnectWatcher(receive, is_armed=False) as ex.watcher:
            if not pipe.observers and ex.limit is NO_LIMIT:
                await _dispatch(pipe, ex)  # nobody reads how it went
                return
            await _observed(pipe, ex)


async def _exchange(
    pipe: Pipeline,
    api: Api,
    scope: Scope,
    receive: Receive,
    send: Send,
    request_id: str,
    started_s: float,
) -> Exchange:
    """The request read, checked and resolved: everything that can refuse it up front."""
    # The key first: a caller without one learns nothing about validation (or our limits).
    caller = await pipe.callers.resolve_model_caller(_authorization(scope))
    tenant = caller.tenant
    assert tenant is not None
    scope[TENANT_SCOPE_KEY] = tenant
    scope[API_SCOPE_KEY] = api.name
    raw = await read_body(receive, scope, pipe.config.server.max_body_bytes)
    # A stored conversation named by the request is expanded into it before anything reads
    # it (the cache key covers the whole conversation); a stored answer is written by the
    # one wrapper around ``send`` that sees its end go out.
    raw, kept = await pipe.states.open(api.name, tenant, raw)
    front = pipe.fronts.get(api.name, tenant, raw)
    if front is None:
        # A large body is parsed, checked and keyed on a worker thread (never memoised).
        front = await off_loop(len(raw), lambda: _front(pipe, api, raw, caller, scope, request_id))
        # A hybrid choice is logged per request, so its requests are resolved each time.
        hybrid = pipe.config.hybrid
        if not (hybrid is not None and front.body["model"] == hybrid.model):
            pipe.fronts.put(api.name, tenant, raw, front)
    else:
        scope[MODEL_SCOPE_KEY] = front.body["model"]
        check_model(caller, front.body["model"], front.model.name)
    body = front.body
    # With tracing on, each attempt sends its own span's traceparent instead of the client's.
    is_trace_forwarded = not pipe.tracer.is_enabled
    return Exchange(
        scope,
        kept.wrap(send, body),
        api,
        body,
        raw,
        front.model,
        tenant,
        front.is_stream,
        front.wants_usage,
        started_s,
        request_id,
        front.extra_headers,
        upstream_headers(
            scope,
            front.is_stream or front.is_assembled,
            not pipe.callers.is_enforcing,
            is_trace_forwarded,
        ),
        is_rewritten=front.is_rewritten,
        is_assembled=front.is_assembled,
        caller=caller,
        front=front,
        previous=kept.previous,
    )


def _front(
    pipe: Pipeline,
    api: Api,
    raw: bytes,
    caller: Caller,
    scope: Scope,
    request_id: str,
) -> Front:
    """The body parsed, checked and resolved, to keep for its repeats (hasten.proxy.fronts);
    off the event loop for a large body (no shared state written)."""
    tenant = caller.tenant
    assert tenant is not None
    body = parse_body(raw, pipe.config.server.max_json_depth)
    check_num_items(body, api.items_param, pipe.config.server.max_messages)
    api.check(body)
    scope[MODEL_SCOPE_KEY] = body["model"]  # the access record's, refused past here or not
    model, extra_headers = _resolve(pipe, api, body, request_id)
    check_model(caller, body["model"], model.name)  # a key's allowed models (404 otherwise)
    # Before the cache key is built: the key, the flight and upstream all see what is sent.
    applied = pipe.policies.apply(body, api.name, model.route.name, tenant, api.param_fields)
    if applied is not None:
        body = applied.body
        extra_headers = (*extra_headers, (POLICY_HEADER, applied.header))
    is_stream = api.is_streamable and api.is_stream(body)
    decision = decide(body, _cache_policy(api, model), parse_cache_control(None))
    keys = None
    if pipe.cache is not None and (decision.is_lookup or decision.is_store):
        keys = _cache_keys(pipe, api, body, model, tenant)
    return Front(
        body,
        model,
        extra_headers,
        applied is not None,
        is_stream,
        is_stream and api.wants_usage(body),
        is_assembled(api, is_stream, model),
        decision,
        keys,
        # A translation for Responses and Messages: made (here, off the loop for a large
        # body) only for the semantic tier, its one reader past this point.
        None if pipe.semantic is None else api.chat_view(body),
    )


def _cache_keys(
    pipe: Pipeline, api: Api, body: dict[str, Any], model: ResolvedModel, tenant: str
) -> tuple[str, str]:
    """The request key (what /admin/cache/invalidate takes) and the key stored under: of
    what in the body can change the answer (``Api.key_view``)."""
    request = request_key(api.key_view(body), endpoint=api.name, model=model.name)
    return request, namespaced_key(request, _namespace(pipe, tenant))


def _namespace(pipe: Pipeline, tenant: str) -> str:
    return "*" if pipe.config.cache.is_shared_across_tenants else tenant


async def _observed(pipe: Pipeline, ex: Exchange) -> None:
    """``_dispatch`` with the client's view recorded (the one wrapper around ``send``),
    settled with the key's limits and reported to the observers once it is over."""
    # The one place the answer's send is wrapped: what the client saw (the metrics, the
    # usage tail), then what the key's limits read of it.
    track = ex.track = ResponseTrack(ex.send)
    ex.send = ex.limit.wrap(track.send)
    if pipe.observers:
        ex.scope[OBSERVED_SCOPE_KEY] = True
    status, code = 0, None
    error: BaseException | None = None
    try:
        await _dispatch(pipe, ex)
    except HastenError as exc:
        status, code, error = exc.status_code, exc.code, exc
        raise
    except (ClientGone, asyncio.CancelledError) as exc:
        code, error = "client_gone", exc
        raise
    except Exception as exc:
        status, error = 500, exc  # a bug: the app logs it and answers 500
        raise
    finally:
        # Settled first and without an await: a second cancellation cannot lose it.
        ex.limit.settle(Spent(ex.is_upstream_call, _usage_tail(ex, track)), error)
        if pipe.observers:
            emit_outcome(pipe, ex, status, code)
        # The error leaves with its traceback, which holds this frame: the frame must not
        # hold the error (a cycle keeping the request's flight until the cycle collector).
        error = None


def _usage_tail(ex: Exchange, track: ResponseTrack) -> bytes:
    """Where the answer's usage is: the pipeline's own note of it, else what the client got
    last."""
    return ex.usage_tail if ex.usage_tail is not None else track.prev + track.tail


def _authorization(scope: Scope) -> bytes | None:
    """The caller's key: ``Authorization: Bearer``, or Anthropic's ``x-api-key``."""
    authorization = header(scope, b"authorization")
    if authorization is None:
        api_key = header(scope, b"x-api-key")
        if api_key is not None:
            return b"Bearer " + api_key
    return authorization


def _upstream_body(ex: Exchange) -> bytes:
    """The client's bytes, re-serialised (once) only for a renamed model, added usage or a
    body a parameter policy changed, or a stream asked for a non-stream client."""
    if not (ex.is_usage_added or ex.model.is_renamed or ex.is_rewritten or ex.is_assembled):
        return ex.raw_body
    return _rendered(ex, ex.body)


def _held_body(ex: Exchange) -> tuple[str, bytes] | None:
    """For a follow-up whose previous response a deployment holds: that deployment's name
    and the body it gets, the request as the client sent it (its ``previous_response_id``
    and own input, not the expanded conversation), changed as every upstream's is."""
    previous = ex.previous
    if previous is None or previous.holder is None:
        return None
    body = {k: v for k, v in ex.body.items() if k != "input"}
    if previous.is_input_sent:
        body["input"] = previous.own_input
    body["previous_response_id"] = previous.response_id
    return previous.holder, _rendered(ex, body)


def _rendered(ex: Exchange, body: dict[str, Any]) -> bytes:
    """``body`` as it goes upstream: the upstream's model name, asked as a stream where the
    gateway streams it."""
    body = {**body, "model": ex.model.upstream_model} if ex.model.is_renamed else {**body}
    if ex.is_assembled:
        return exactjson.dumps(ex.api.as_stream(body, with_usage=ex.api.can_add_usage()))
    if ex.is_usage_added:
        body = ex.api.as_stream(body, with_usage=True)
    return exactjson.dumps(body)  # integers past 64 bits as the client wrote them


def _resolve(
    pipe: Pipeline, api: Api, body: dict[str, Any], request_id: str
) -> tuple[ResolvedModel, tuple[tuple[bytes, bytes], ...]]:
    """The route for this request; a hybrid model name picks local or cloud per request
    (from the request as chat: its messages and lengths)."""
    hybrid = pipe.config.hybrid
    if hybrid is None or body["model"] != hybrid.model:
        return pipe.router.resolve(body["model"]), ()
    choice = decide_hybrid(api.chat_view(body) or body, hybrid)
    _log.info("request %s: hybrid %s", request_id, choice.header)
    model = pipe.router.resolve(route_name(hybrid.model, choice.target))
    return model, ((b"x-hasten-hybrid", choice.header.encode()),)


async def _dispatch(pipe: Pipeline, ex: Exchange) -> None:
    decision = _decide(ex)
    if pipe.cache is None or not decision.is_lookup:
        ex.listen()  # only a lookup can answer without waiting
    # Usage is asked of the upstream for the cache and for a key whose limits read it.
    ex.is_usage_added = (
        ex.is_stream
        and not ex.wants_usage
        and ex.model.has_stream_options
        and ex.api.can_add_usage()
        and ((pipe.cache is not None and decision.is_store) or _reads_usage(ex))
    )
    if pipe.cache is None or not (decision.is_lookup or decision.is_store):
        pipe.stats.count("bypass", tenant=ex.tenant)
        ex.trace.set("hasten.cache", "bypass")
        await _admit(ex, is_hit=False)
        await _forward_direct(pipe, ex)
        return
    namespace = _namespace(pipe, ex.tenant)
    keys = ex.front.keys
    if keys is None:  # not cacheable without Cache-Control, but this request's directives
        keys = _cache_keys(pipe, ex.api, ex.body, ex.model, ex.tenant)
    request, key = keys
    varied = answer_headers(ex.forwarded_headers)
    if varied:  # an organisation, project or beta the upstream answers for
        request = with_headers(request, varied)
        key = namespaced_key(request, namespace)
    # What /admin/cache/invalidate takes as "key"; it only ever names the caller's entry.
    ex.extra_headers = (*ex.extra_headers, (b"x-hasten-cache-key", request.encode()))
    flight_key = None  # what a miss needs; built up front only for the fleet's early ask
    fleet = pipe.fleet
    early = None
    if fleet.is_on and decision.is_lookup:
        flight_key = _flight_key(ex, key, decision)
        if not pipe.coalescer.is_flying(flight_key):
            early = fleet.early(flight_key)  # asked at the L1 miss, so it overlaps what follows
            ex.listen()
    try:
        await _lookup_and_serve(pipe, ex, decision, key, namespace, flight_key, early)
    finally:
        if early is not None:
            fleet.release(early)  # unless the flight's pump took it over


async def _lookup_and_serve(
    pipe: Pipeline,
    ex: Exchange,
    decision: CacheDecision,
    key: str,
    namespace: str,
    flight_key: str | None,
    early: EarlyAsk | None,
) -> None:
    assert pipe.cache is not None
    if decision.is_lookup:
        with ex.trace.child("cache.lookup") as lookup:
            on_l1_miss = ex.listen if early is None else early.ask
            entry = await pipe.cache.get(key, max_age_s=decision.max_age_s, on_l1_miss=on_l1_miss)
            replay = None if entry is None else _replay(pipe, ex, entry, key)
            if entry is not None and replay is None:
                await _drop_unservable(pipe, key)
            lookup.set("hasten.cache.is_hit", replay is not None)
        if replay is not None:
            pipe.stats.count("hit", tenant=ex.tenant)
            ex.cache_label = HIT
            ex.trace.set("hasten.cache", "hit")
            if ex.limit is not NO_LIMIT:
                ex.listen()  # an admission may wait
            await _admit(ex, is_hit=True)
            with ex.trace.child("cache.replay"):
                await _serve_hit(pipe, ex, replay, b"hit")
            return
        ex.listen()
        # Admitted as a miss before the semantic lookup: a key over its limit must not
        # make the gateway embed its questions (a semantic hit is refunded at the end).
        await _admit(ex, is_hit=False)
        question = None if pipe.semantic is None else ex.chat_view
        if pipe.semantic is not None and question is not None:
            looked_s = time.perf_counter()
            with ex.trace.child("semantic.lookup") as lookup:
                hit = await pipe.semantic.find(
                    dict(question),
                    model=ex.model.name,
                    tenant=namespace,
                    max_age_s=decision.max_age_s,
                    trace=lookup,
                )
                lookup.set("hasten.cache.is_hit", hit is not None)
            ex.semantic_s = time.perf_counter() - looked_s
            replay = None if hit is None else _replay(pipe, ex, hit.entry)
            if hit is not None and replay is None:
                _note_unservable(pipe, "a semantic hit")  # asked upstream below
            elif hit is not None and replay is not None:
                pipe.stats.count("semantic_hit", tenant=ex.tenant)
                ex.cache_label = SEMANTIC
                ex.trace.set("hasten.cache", "semantic")
                with ex.trace.child("cache.replay"):
                    await _serve_hit(pipe, ex, replay, b"semantic", hit.headers())
                return
    if not decision.is_lookup:
        await _admit(ex, is_hit=False)
    pipe.stats.count("miss" if decision.is_lookup else "bypass", tenant=ex.tenant)
    ex.cache_label = MISS if decision.is_lookup else BYPASS
    ex.trace.set("hasten.cache", "miss" if decision.is_lookup else "bypass")
    stored = _Stored(pipe, ex, key, namespace) if decision.is_store else None
    if flight_key is None:
        flight_key = _flight_key(ex, key, decision)
    run = _flight_run(pipe, ex, stored, flight_key, decision.is_lookup, early)
    flight, is_new = pipe.coalescer.join(flight_key, run)
    if not is_new:
        pipe.stats.count("coalesced", tenant=ex.tenant)
        ex.cache_label = COALESCED
        ex.trace.set("hasten.coalesced", True)
    ex.is_upstream_call = is_new
    try:
        await _serve_flight(pipe, ex, flight, b"miss" if decision.is_lookup else b"bypass")
    finally:
        pipe.coalescer.leave(flight)


def _reads_usage(ex: Exchange) -> bool:
    return ex.limit.is_reading_usage


async def _admit(ex: Exchange, *, is_hit: bool) -> None:
    """The key's admission (hasten.limits), once hit or miss is known: a 429 when a limit
    says no, else its rate headers on the answer."""
    headers = await ex.limit.admit(is_hit=is_hit)
    if headers:
        ex.extra_headers = (*ex.extra_headers, *headers)


def _flight_run(
    pipe: Pipeline,
    ex: Exchange,
    stored: _Stored | None,
    flight_key: str,
    is_shared: bool,
    early: EarlyAsk | None,
) -> Callable[[Flight], Awaitable[None]]:
    """What fills a new flight: this replica's upstream call, or the fleet's (hasten.fleet)."""
    fleet = pipe.fleet

    def pump(flight: Flight) -> Awaitable[None]:
        return _pump(pipe, ex, flight, stored)

    if not fleet.is_on or not is_shared:
        return pump

    async def fleet_pump(flight: Flight) -> None:
        recorder = None if stored is None else stored.recorder
        commit = None if stored is None else stored.commit
        job = FleetJob(
            flight_key,
            pump,
            lambda: _open(pipe, ex),
            recorder,
            commit,
            ex.is_upstream_stream,
            ex.api.name,
            _is_idempotent(ex),
            ex.model.route.max_answer_bytes,
        )
        await fleet.pump(flight, job, early)

    return fleet_pump


def _flight_key(ex: Exchange, key: str, decision: CacheDecision) -> str:
    """Requests with one key share a flight only if one upstream call can answer them all."""
    if not decision.is_lookup:
        return f"solo:{ex.request_id}"  # a no-cache request asked for its own fresh answer
    if not ex.is_upstream_stream:
        return f"{key}:0"
    if decision.is_store and ex.model.has_stream_options:
        return f"{key}:1"  # usage always asked for: each client keeps or drops the event
    # Not stored, or to an upstream that takes no ``stream_options``: sent as the client
    # sent it, so it is shared only by requests that made the same usage choice (an
    # assembled request always asks for usage, and so does one for a key's limits).
    return f"{key}:1:{int(ex.wants_usage or ex.is_assembled or ex.is_usage_added)}"


class _Stored:
    """Where a complete answer goes: the exact tiers, then the semantic index."""

    __slots__ = ("_ex", "_key", "_pipe", "_tenant", "recorder")

    def __init__(self, pipe: Pipeline, ex: Exchange, key: str, tenant: str) -> None:
        assert pipe.cache is not None
        self._pipe, self._ex, self._key, self._tenant = pipe, ex, key, tenant
        ttl_s = ex.model.cache.ttl_s
        self.recorder = Recorder(pipe.cache, key, ex.api, ex.is_upstream_stream, ttl_s=ttl_s)

    def commit(self) -> None:
        if not self.recorder.commit():
            return
        semantic = self._pipe.semantic
        question = None if semantic is None else self._ex.chat_view
        if semantic is None or question is None:
            return
        semantic.remember(
            dict(question),
            model=self._ex.model.name,
            tenant=self._tenant,
            key=self._key,
            ttl_s=self._ex.model.cache.ttl_s,
        )


def _decide(ex: Exchange) -> CacheDecision:
    """The front's decision, unless the request's Cache-Control says otherwise."""
    cache_control = _header_str(ex.scope, b"cache-control")
    if cache_control is None:
        return ex.front.decision
    directives = parse_cache_control(cache_control)
    return decide(ex.body, _cache_policy(ex.api, ex.model), directives)


def _cache_policy(api: Api, model: ResolvedModel) -> ModelCachePolicy:
    # An embedding is deterministic whatever the request says: always cacheable.
    return model.cache if api.is_generating else _EMBEDDING_POLICY


def _header_str(scope: Scope, name: bytes) -> str | None:
    value = header(scope, name)
    return value.decode("latin-1") if value is not None else None


async def _open(
    pipe: Pipeline,
    ex: Exchange,
    body: bytes | None = None,
    excluded: frozenset[str] = frozenset(),
) -> UpstreamCall:
    pipe.stats.count("upstream_calls", tenant=ex.tenant)
    request = ClientRequest(
        ex.api.name,
        _upstream_body(ex) if body is None else body,
        ex.body,
        ex.forwarded_headers,
        model=ex.model.upstream_model,
        is_stream=ex.is_upstream_stream,
        held=_held_body(ex) if body is None else None,
    )
    return await pipe.client.open(
        ex.model,
        request,
        ex.api,
        parsed=ex.api.affinity_view(ex.body),
        is_stream=ex.is_upstream_stream,
        is_idempotent=_is_idempotent(ex),
        trace=ex.trace,
        excluded=excluded,
    )


def _is_idempotent(ex: Exchange) -> bool:
    # A client marks a request that must not run twice (never hedged, never resumed) this way.
    return header(ex.scope, b"x-hasten-idempotent") not in (b"false", b"0", b"no")


def _resumable(pipe: Pipeline, ex: Exchange, call: UpstreamCall) -> StreamResume | None:
    """The resume of this call's stream, when its route continues broken streams."""
    if not (ex.model.route.is_resuming_streams and ex.is_upstream_stream and call.status == 200):
        return None
    if not ex.api.has_done:
        return None  # a continuation splices chat or completions text
    if not _is_idempotent(ex):
        return None  # a continuation is a second request

    def reopen(body: bytes, excluded: frozenset[str]) -> Awaitable[UpstreamCall]:
        return _open(pipe, ex, body, excluded)

    return StreamResume(reopen, ex.model.route, ex.api.name, lambda: _upstream_body(ex))


async def _forward_direct(pipe: Pipeline, ex: Exchange) -> None:
    """A bypass: its own upstream call, served as a flight with one waiter."""
    call = await _open(pipe, ex)
    ex.is_upstream_call = True
    resume = _resumable(pipe, ex, call)
    try:
        # A continued stream, spliced from several calls, is assembled from its bytes.
        assembly = None if resume is not None else _assembly(ex, call)
        chunks = call.iter_chunks(assembly) if resume is None else resume.chunks(call)
        direct = DirectFlight(
            call,
            chunks,
            assembly,
            is_assembled=ex.is_assembled and call.status == 200,
            is_tail_kept=ex.trace.is_recording,
        )
        await _serve_flight(pipe, ex, direct, b"bypass")
    finally:
        call.close()
        _note_resume(ex, resume)


def _assembly(ex: Exchange, call: UpstreamCall) -> Assembly | None:
    """Where a non-stream client's body is merged as the guard checks the call's events."""
    if not ex.is_assembled or call.status != 200:
        return None
    return Assembly(ex.api)


def _listeners(
    ex: Exchange, call: UpstreamCall, recorder: Recorder | None, assembly: Assembly | None
) -> EventSink | None:
    """Who takes the events the call's guard checks: the recorder (then the assembly).
    A stream request's answer is guarded as a stream whatever its content type."""
    if recorder is None or call.status != 200 or not ex.is_upstream_stream:
        return assembly  # no guard, no events: the recorder decodes the bytes itself
    return recorder.listen(assembly)


async def _stream_body(
    send: Send,
    chunks: AsyncIterator[bytes],
    api: Api,
    error: Callable[[], HastenError | None] | None = None,
) -> None:
    """Forwards chunks as they come; a failure ends the stream with the API's error event
    (chat's ``error``, ``response.failed`` numbered after what was sent, Anthropic's
    ``error``), never a silent end."""
    failure: HastenError | None = None
    first = last = b""
    try:
        async for chunk in chunks:
            if not first:
                first = chunk
            last = chunk
            await send_body(send, chunk)
    except HastenError as exc:
        failure = exc.detached()  # its traceback would hold this frame, and it this one
    if failure is None and error is not None:
        failure = error()
    if failure is not None:
        await send_body(send, api.failure_event(failure, first[:4096] + last[-4096:]))
    await send_body(send, b"", more_body=False)


async def _pump(pipe: Pipeline, ex: Exchange, flight: Flight, stored: _Stored | None) -> None:
    """Runs one upstream call into a flight; stores the answer when it completed cleanly."""
    try:
        call = await _open(pipe, ex)
    except HastenError as exc:
        flight.finish(exc)
        return
    resume = _resumable(pipe, ex, call)
    try:
        flight.start(call.status, call.headers, call.upstream.name, call.ttfb_ms)
        if call.status != 200:
            stored = None  # only a successful answer is recorded
        recorder = None if stored is None else stored.recorder
        if resume is not None:
            chunks = resume.chunks(call)
        else:
            flight.assembly = _assembly(ex, call)
            chunks = call.iter_chunks(_listeners(ex, call, recorder, flight.assembly))
        try:
            # Usage asked for a key's limits, with nothing recorded: marked from the bytes.
            marks = usage_marks if recorder is None and ex.is_usage_added else None
            async for chunk in chunks:
                # Recorded first: a chunk completing a usage event is marked before it is read.
                if recorder is not None:
                    flight.push(chunk, recorder.feed(chunk))
                else:
                    flight.push(chunk, 0 if marks is None else marks(chunk))
        except HastenError as exc:
            flight.finish(exc)
            return
    finally:
        call.close()
        _note_resume(ex, resume)
    flight.finish()
    if stored is None or not (resume is None or resume.is_cacheable):
        return
    if flight.assembly is not None and not flight.assembly.is_whole():
        return  # its client gets a 502: a later one must not be served the same from cache
    stored.commit()


def _note_resume(ex: Exchange, resume: StreamResume | None) -> None:
    """What the metrics and the trace learn of a continued stream (hasten.proxy.resumer)."""
    if resume is not None and resume.outcome:
        ex.resume = resume.outcome
        ex.trace.set("hasten.resume", resume.outcome)


def _note_call(ex: Exchange, headers: Mapping[str, str], name: str, ttfb_ms: float) -> None:
    """What the metrics learn of the upstream call that answers ``ex``."""
    ex.call_headers, ex.deployment, ex.upstream_ttfb_ms = headers, name, ttfb_ms


async def _serve_flight(
    pipe: Pipeline, ex: Exchange, flight: Flight | DirectFlight, label: bytes
) -> None:
    """The one exit of an upstream answer to its client: a shared flight's (a miss, a
    coalesced request) or a bypass's own (``DirectFlight``)."""
    if not ex.is_upstream_call:  # a follower: it waits for another request's call
        with ex.trace.child("coalescing.wait"):
            await flight.wait_started()
    else:
        await flight.wait_started()
    if flight.is_relayed and ex.is_upstream_call:  # another replica's call answers it
        ex.is_upstream_call, ex.cache_label = False, COALESCED
        pipe.stats.count("coalesced", tenant=ex.tenant)
    if ex.cache_label == COALESCED:  # what the metrics say, the client reads too
        label = _COALESCED_LABEL
    _note_call(ex, flight.headers, flight.upstream_name, flight.ttfb_ms)
    saved = hedge_saved(pipe, ex) if ex.is_upstream_call else None
    if ex.is_stream and flight.status == 200:
        await start_stream(ex.send, 200, _head(ex, flight, label, saved, is_assembled=False))
        chunks = flight.iter_chunks_without_usage() if ex.is_usage_added else flight.iter_chunks()
        await _stream_body(ex.send, chunks, ex.api, lambda: flight.error)
        describe_answer(ex.trace, 200, flight.chunks, is_stream=True)
        if flight.error is not None:
            ex.trace.fail(flight.error)
        if ex.is_usage_added:  # for the metrics and a key's token limit
            ex.usage_tail = b"".join(flight.chunks[-2:])  # the client's copy has no usage
        return
    await flight.wait_done()
    if flight.error is not None:
        raise flight.error.copy()  # shared by the flight's waiters
    is_assembled = ex.is_assembled and flight.status == 200
    if is_assembled:
        # Its chunks are not joined: the assembly has the body (a copy of what may be
        # max_answer_bytes, made only to be thrown away, is not).
        assembly = flight.assembly
        body = assemble(flight.chunks, ex.api) if assembly is None else assembly.body()
    else:
        body = b"".join(flight.chunks)
    headers = _head(ex, flight, label, saved, is_assembled=is_assembled)
    describe_answer(ex.trace, flight.status, body, is_stream=False)
    await send_response(ex.send, flight.status, body, headers)


def _head(
    ex: Exchange,
    flight: Flight | DirectFlight,
    label: bytes,
    saved: tuple[bytes, bytes] | None,
    *,
    is_assembled: bool,
) -> Headers:
    """The response head of an upstream answer: the upstream's headers that pass (or those
    of a body assembled from its stream), then the gateway's (``_gateway_head``), then how
    a broken stream was continued."""
    if is_assembled:
        passed = assembled_headers(flight.headers)
        headers = _gateway_head(ex, passed, label, flight.upstream_ms, saved)
        if ex.model.route.is_resuming_streams:
            resumed = resume_header(b"".join(flight.chunks[-2:]))
            if resumed is not None:
                headers.append(resumed)
        return headers
    passed = response_headers(flight.headers, flight.status, ex.is_stream)
    return _gateway_head(ex, passed, label, flight.ttfb_ms, saved)


def _gateway_head(
    ex: Exchange,
    headers: Headers,
    label: bytes,
    upstream_ms: float | None,
    saved: tuple[bytes, bytes] | None,
    more: Iterable[tuple[bytes, bytes]] = (),
) -> Headers:
    """Every answer's head, in one order whatever served it: ``headers`` (its content type
    and what passes from the upstream), the cache label, request id, Server-Timing and the
    request's own (``Exchange.base_headers``), then ``more`` (a semantic hit's), then the
    time saved."""
    headers.extend(ex.base_headers(label, upstream_ms))
    headers.extend(more)
    if saved is not None:
        headers.append(saved)
    return headers


@dataclass(slots=True)  # not frozen: built on every hit, and frozen costs 3x to build
class _Replay:
    """A cached answer in the form its client reads: one body (JSON, or the whole SSE
    stream), or SSE frames to pace."""

    entry: CachedAnswer
    body: bytes
    frames: list[bytes] | None = None


def _replay(
    pipe: Pipeline, ex: Exchange, entry: CachedAnswer, key: str | None = None
) -> _Replay | None:
    """``entry`` rendered for this client, or None when it has no such form.

    An answer is stored in the form its first client read; the other form is built from
    it, and an upstream's answer need not allow that (a stream whose text pieces are not
    strings merges into no body). ``key``: the exact cache's key of ``entry``, where the
    body merged from a stream answer is kept for the next non-stream hit.
    """
    try:
        api = ex.api
        if ex.is_stream and pipe.config.cache.replay != "instant":
            frames = replay.answer_frames(entry, api, include_usage=ex.wants_usage)
            return _Replay(entry, b"", frames)
        if ex.is_stream:
            return _Replay(entry, replay.answer_stream(entry, api, include_usage=ex.wants_usage))
        body = replay.answer_body(entry, api)
        fresh = api.fresh_body(body)  # a new id where the API's clients keep it
    except ValueError:
        return None
    if entry.body is None and key is not None and pipe.cache is not None:
        pipe.cache.keep_body(key, entry, body)  # merged once, not on every hit
    return _Replay(entry, fresh)


async def _drop_unservable(pipe: Pipeline, key: str) -> None:
    """An entry this client cannot be given is dropped: the request goes upstream as a
    miss, and its answer may replace the entry."""
    assert pipe.cache is not None
    _note_unservable(pipe, f"cache entry {key[:16]}")
    await pipe.cache.delete(key)


def _note_unservable(pipe: Pipeline, what: str) -> None:
    _log.warning("%s has no form for this client; asked upstream instead", what)
    pipe.stats.count("unservable_entries")


async def _serve_hit(
    pipe: Pipeline,
    ex: Exchange,
    replay: _Replay,
    label: bytes,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Sends a cached answer rendered by ``_replay``."""
    entry, body, frames = replay.entry, replay.body, replay.frames
    describe_cached(ex.trace, entry)
    interval_s = 0.0 if frames is None else pipe.config.cache.replay_chunk_interval_ms / 1000.0
    num_gaps = 0 if frames is None else max(0, len(frames) - 1)
    saved = answer_saved(pipe, ex, entry, interval_s * num_gaps)
    more = extra_headers or ()
    if not ex.is_stream:
        headers = _gateway_head(ex, [JSON_CONTENT_TYPE], label, None, saved, more)
        await send_response(ex.send, 200, body, headers)
        return
    await start_stream(ex.send, 200, _gateway_head(ex, [*SSE_HEADERS], label, None, saved, more))
    if frames is None:
        await send_body(ex.send, body, more_body=False)
        return
    ex.listen()
    for i, frame in enumerate(frames):
        if i:
            await asyncio.sleep(interval_s)
        await send_body(ex.send, frame)
    await send_body(ex.send, b"", more_body=False)

"""Pure ASGI, OpenAI-compatible server for the local engine (model ``local``).

Routes: ``POST /v1/chat/completions`` (stream and not), ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health``. A full engine queue answers 429 with
Retry-After; a client that disconnects has its request cancelled, freeing its slot.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from hasten.config.local import MODEL_ID
from hasten.errors import (
    ClientGone,
    ContextTooLong,
    EngineFailed,
    EngineQueueFull,
    HastenError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    RateLimited,
)
from hasten.local.engine import Engine, Generation, StreamEvent, Usage
from hasten.local.protocol import (
    ChatRequest,
    chunk_body,
    completion_body,
    completion_id,
    model_body,
    models_body,
    parse_chat_request,
    usage_chunk_body,
)
from hasten.proxy.validation import parse_body
from hasten.wire.asgi import (
    SSE_DONE,
    ASGIApp,
    DisconnectWatcher,
    Message,
    Receive,
    Scope,
    Send,
    accept_lifespan,
    read_body,
    send_body,
    send_error,
    send_json,
    sse_event,
    start_sse,
)

_log = logging.getLogger(__name__)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def build_app(
    engine: Engine,
    *,
    model_id: str = MODEL_ID,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    is_any_model: bool = False,
) -> ASGIApp:
    return LocalApp(
        engine, model_id=model_id, max_body_bytes=max_body_bytes, is_any_model=is_any_model
    )


class LocalApp:
    def __init__(
        self, engine: Engine, *, model_id: str, max_body_bytes: int, is_any_model: bool = False
    ) -> None:
        # Behind the gateway the engine answers whatever name a route sends it: a hybrid
        # route forwards the cloud model's name to both, so a fallback needs no rewrite.
        self.is_any_model = is_any_model
        self.engine = engine
        self.model_id = model_id
        self.max_body_bytes = max_body_bytes
        self.created = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await accept_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        is_started = False

        async def tracked_send(message: Message) -> None:
            nonlocal is_started
            is_started = True
            await send(message)

        try:
            await self._route(scope, receive, tracked_send)
        except HastenError as exc:
            if not is_started:
                await send_error(send, exc)
        except ClientGone:
            pass  # its generation is cancelled already; nobody to answer
        except Exception:
            _log.exception("local: internal error")
            if not is_started:
                await send_error(send, HastenError("internal server error"))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"].rstrip("/")
        method: str = scope["method"]
        if path == "/v1/chat/completions":
            _require(method, "POST")
            await self._chat(scope, receive, send)
        elif path == "/v1/models":
            _require(method, "GET")
            await send_json(send, 200, orjson.dumps(models_body(self.model_id, self.created)))
        elif path.startswith("/v1/models/"):
            _require(method, "GET")
            if path.removeprefix("/v1/models/") != self.model_id:
                raise ModelNotFound(f"model '{path.removeprefix('/v1/models/')}' not found")
            await send_json(send, 200, orjson.dumps(model_body(self.model_id, self.created)))
        elif path == "/health":
            health = {"status": "ok", **self.engine.stats()}
            health["step_modes"] = self.engine.threads.best_modes()
            await send_json(send, 200, orjson.dumps(health))
        else:
            raise NotFound(f"no route for {method} {path}")

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = parse_chat_request(
            parse_body(await read_body(receive, scope, self.max_body_bytes))
        )
        if request.model != self.model_id and not self.is_any_model:
            raise ModelNotFound(f"model '{request.model}' not found", param="model")
        generation = self._submit(request)
        try:
            with DisconnectWatcher(receive):
                if request.is_stream:
                    await self._stream(send, request, generation)
                else:
                    await self._complete(send, generation)
        finally:
            # Frees the sequence at once when the client left or anything failed.
            generation.cancel()

    def _submit(self, request: ChatRequest) -> Generation:
        try:
            return self.engine.submit_chat(request.messages, request.sampling)
        except EngineQueueFull as exc:
            raise RateLimited(
                f"local engine queue is full: {exc}", retry_after_s=exc.retry_after_s
            ) from None
        except ContextTooLong as exc:
            raise InvalidRequest(
                str(exc), param="messages", code="context_length_exceeded"
            ) from None
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="messages") from None

    async def _complete(self, send: Send, generation: Generation) -> None:
        parts: list[str] = []
        final: StreamEvent | None = None
        async for event in generation:
            parts.append(event.text)
            final = event
        if final is None or final.error is not None or final.usage is None:
            raise EngineFailed(final.error if final and final.error else "generation failed")
        body = completion_body(
            completion_id(),
            self.model_id,
            "".join(parts),
            final.finish_reason or "stop",
            final.usage,
        )
        await send_json(send, 200, orjson.dumps(body))

    async def _stream(self, send: Send, request: ChatRequest, generation: Generation) -> None:
        response_id, created = completion_id(), int(time.time())
        await start_sse(send)
        first = chunk_body(
            response_id, self.model_id, {"role": "assistant", "content": ""}, created=created
        )
        await _send_event(send, first)
        usage: Usage | None = None
        async for event in generation:
            if event.error is not None:
                error = EngineFailed(event.error)
                await _send_event(send, error.to_dict())
                break
            if event.text:
                chunk = chunk_body(
                    response_id, self.model_id, {"content": event.text}, created=created
                )
                await _send_event(send, chunk)
            if event.finish_reason is not None:
                usage = event.usage
                await _send_event(
                    send, chunk_body(response_id, self.model_id, {}, event.finish_reason, created)
                )
        if usage is not None and request.includes_usage:
            await _send_event(send, usage_chunk_body(response_id, self.model_id, usage, created))
        await send_body(send, SSE_DONE, more_body=False)


def _require(method: str, expected: str) -> None:
    if method != expected:
        raise MethodNotAllowed(f"method {method} not allowed here; use {expected}", allow=expected)


async def _send_event(send: Send, payload: dict[str, Any]) -> None:
    await send_body(send, sse_event(orjson.dumps(payload)))

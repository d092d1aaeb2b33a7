"""``POST /v1/messages/count_tokens``: how many input tokens a Messages request holds.

Asked of the route's upstream when every deployment it may go to speaks Messages (its own
count, from its own tokenizer); estimated here otherwise (``hasten.apis.messages
.count_tokens``, which says how), since a chat upstream has no such endpoint. Either way
the caller's key and its allowed models are checked first, as for a model request.
"""

from __future__ import annotations

import orjson

from hasten.apis import messages
from hasten.apis.known import MESSAGES, MESSAGES_API
from hasten.proxy.headers import response_headers, upstream_headers
from hasten.proxy.pipeline import Pipeline
from hasten.proxy.validation import parse_body
from hasten.upstream.bridge import NativeOnly
from hasten.values.caller import check_model
from hasten.wire.asgi import Receive, Scope, Send, header, read_body, send_json, send_response

_PATH = "/messages/count_tokens"


async def count_tokens(pipe: Pipeline, scope: Scope, receive: Receive, send: Send) -> None:
    authorization = header(scope, b"authorization")
    if authorization is None and (api_key := header(scope, b"x-api-key")) is not None:
        authorization = b"Bearer " + api_key
    caller = await pipe.callers.resolve_model_caller(authorization)
    raw = await read_body(receive, scope, pipe.config.server.max_body_bytes)
    body = parse_body(raw, pipe.config.server.max_json_depth)
    messages.check_count_request(body)
    model = pipe.router.resolve(body["model"])
    check_model(caller, body["model"], model.name)
    upstreams = model.route.upstreams.values()
    if upstreams and all(MESSAGES in upstream.speaks for upstream in upstreams):
        forwarded = upstream_headers(scope, False, not pipe.callers.is_enforcing)
        upstream_body = orjson.dumps({**body, "model": model.upstream_model})
        request = NativeOnly(_PATH, upstream_body, forwarded)
        call = await pipe.client.open(
            model, request, MESSAGES_API, parsed=MESSAGES_API.affinity_view(body), is_stream=False
        )
        try:
            answer = await call.read()
        finally:
            call.close()
        await send_response(
            send, call.status, answer, response_headers(call.headers, call.status, False)
        )
        return
    counted = {"input_tokens": messages.count_tokens(body)}
    await send_json(send, 200, orjson.dumps(counted), [(b"x-hasten-count", b"estimated")])

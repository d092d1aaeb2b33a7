"""Hostile input through the real gateway and simulator: every answer an OpenAI-shaped error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from hasten.config import CacheConfig, GatewayConfig
from hasten.errors import InvalidRequest
from hasten.simulator import SimConfig, build_app
from hasten.validation import parse_body
from tests.gateway_fixtures import chat_body, completion, make_config, running_gateway
from tests.servers import ServerThread


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _config(sim: ServerThread, **server: Any) -> GatewayConfig:
    config = make_config({"sim": sim.url + "/v1"}, models=("sim-model",))
    return replace(config, server=replace(config.server, **server))


@pytest.fixture(scope="module")
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    with running_gateway(_config(sim)) as server:
        yield server


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _chat_with(field: str, value: str) -> bytes:
    return (
        '{"model": "sim-model", "temperature": 0, '
        f'"messages": [{{"role": "user", "content": "hi"}}], "{field}": {value}}}'
    ).encode()


# --- 1: deeply nested JSON ----------------------------------------------------------------


@pytest.mark.parametrize("depth", [254, 1000])
def test_deeply_nested_unknown_field_is_400_naming_it(gateway: ServerThread, depth: int) -> None:
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions", content=_chat_with("x", _nested(depth))
    )
    error = _error(response, 400)
    assert error["param"] == "x"
    assert error["code"] == "json_too_deep"
    assert "64" in error["message"]


def test_nesting_up_to_the_limit_is_served(gateway: ServerThread) -> None:
    # The body object is level 1: a field holding 63 nested arrays reaches level 64.
    url, body = f"{gateway.url}/v1/chat/completions", _chat_with("x", _nested(63))
    response = httpx.post(url, content=body)
    assert response.status_code == 200, response.text
    again = httpx.post(url, content=body)
    assert again.headers["x-hasten-cache"] == "hit"


def test_max_json_depth_is_configurable(sim: ServerThread) -> None:
    with running_gateway(_config(sim, max_json_depth=8)) as gateway:
        url = f"{gateway.url}/v1/chat/completions"
        assert httpx.post(url, content=_chat_with("x", _nested(7))).status_code == 200
        error = _error(httpx.post(url, content=_chat_with("x", _nested(8))), 400)
        assert error["param"] == "x" and "8 levels" in error["message"]


def test_simulator_answers_nested_messages_with_an_openai_400(sim: ServerThread) -> None:
    content = f'[{{"type": "text", "text": "hi", "x": {_nested(300)}}}]'
    body = f'{{"model": "sim-model", "messages": [{{"role": "user", "content": {content}}}]}}'
    response = httpx.post(f"{sim.url}/v1/chat/completions", content=body.encode())
    error = _error(response, 400)
    assert error["param"] == "messages" and error["type"] == "invalid_request_error"


def test_depth_check_counts_levels_not_brackets() -> None:
    # Many brackets side by side (or inside strings) are shallow and pass.
    wide = '{"a": [' + ", ".join(["[]"] * 500) + '], "s": "' + "[" * 500 + '"}'
    assert len(parse_body(wide.encode(), 4)["a"]) == 500
    for raw in (b'{"a": {"b": [[[]]]}}', b'{"s": "' + b"t" * 9000 + b'", "a": [[[[]]]]}'):
        with pytest.raises(InvalidRequest, match="nested more than 4") as info:
            parse_body(raw, 4)
        assert info.value.param == "a"


# --- 12: forwarded header bytes are unchanged -----------------------------------------------


class HeaderRecorder:
    """An upstream that keeps the raw request headers it got and answers with raw bytes."""

    def __init__(self, response_headers: list[tuple[bytes, bytes]]) -> None:
        self.requests: list[list[tuple[bytes, bytes]]] = []
        self.response_headers = response_headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        self.requests.append(list(scope["headers"]))
        headers = [(b"content-type", b"application/json"), *self.response_headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": orjson.dumps(completion("ok"))})


def _through_gateway(upstream: HeaderRecorder, **headers: bytes) -> httpx.Response:
    with ServerThread(upstream) as server:
        config = make_config({"up": server.url + "/v1"}, cache=CacheConfig(is_enabled=False))
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            return httpx.post(url, json=chat_body(), headers=headers)


def test_forwarded_header_bytes_reach_upstream_unchanged() -> None:
    upstream = HeaderRecorder([])
    response = _through_gateway(
        upstream, **{"openai-organization": b"caf\xc3\xa9", "authorization": b"Bearer k\xc3\xa9"}
    )
    assert response.status_code == 200, response.text
    sent = dict(upstream.requests[0])
    assert sent[b"openai-organization"] == b"caf\xc3\xa9"
    assert sent[b"authorization"] == b"Bearer k\xc3\xa9"


def test_upstream_header_bytes_reach_the_client_unchanged() -> None:
    upstream = HeaderRecorder([(b"x-request-id", b"req-\xc3\xa9"), (b"openai-version", b"v\xe9")])
    response = _through_gateway(upstream)
    assert response.status_code == 200, response.text
    raw = dict(response.headers.raw)
    assert raw[b"x-request-id"] == b"req-\xc3\xa9"
    assert raw[b"openai-version"] == b"v\xe9"  # not UTF-8, and still passed as it came


def test_header_bytes_that_cannot_pass_unchanged_are_refused(gateway: ServerThread) -> None:
    # aiohttp writes header text as UTF-8: a lone latin-1 byte cannot reach upstream as is.
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=chat_body(),
        headers={"openai-organization": b"caf\xe9"},
    )
    error = _error(response, 400)
    assert error["param"] == "openai-organization" and error["code"] == "invalid_header"

"""Hostile input through the real gateway and simulator: every answer an OpenAI-shaped error."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from hasten.config import CacheConfig, GatewayConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import (
    chat_body,
    completion,
    make_config,
    read_request,
    running_gateway,
    send_answer,
)
from tests.support.servers import GatewayProcess, ServerThread


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


# --- 12: forwarded header bytes are unchanged -----------------------------------------------


class HeaderRecorder:
    """An upstream that keeps the raw request headers it got and answers with raw bytes."""

    def __init__(self, response_headers: list[tuple[bytes, bytes]]) -> None:
        self.requests: list[list[tuple[bytes, bytes]]] = []
        self.response_headers = response_headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = orjson.loads(await read_request(receive))
        self.requests.append(list(scope["headers"]))
        is_stream = request.get("stream") is True
        await send_answer(send, 200, self.response_headers, completion("ok"), is_stream=is_stream)


def _through_gateway(
    upstream: HeaderRecorder, headers: dict[bytes, bytes] | None = None
) -> httpx.Response:
    with ServerThread(upstream) as server:
        config = make_config({"up": server.url + "/v1"}, cache=CacheConfig(is_enabled=False))
        with running_gateway(config) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            return httpx.post(url, json=chat_body(), headers=headers)


def test_forwarded_header_bytes_reach_upstream_unchanged() -> None:
    upstream = HeaderRecorder([])
    response = _through_gateway(
        upstream, {b"openai-organization": b"caf\xc3\xa9", b"authorization": b"Bearer k\xc3\xa9"}
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
        headers={b"openai-organization": b"caf\xe9"},
    )
    error = _error(response, 400)
    assert error["param"] == "openai-organization" and error["code"] == "invalid_header"


# --- 13: smaller ones -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/chat/completions", "POST"),
        ("GET", "/v1/embeddings", "POST"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/v1/models", "GET, HEAD"),
    ],
)
def test_405_carries_an_allow_header(
    gateway: ServerThread, sim: ServerThread, method: str, path: str, allow: str
) -> None:
    response = httpx.request(method, f"{gateway.url}{path}")
    assert _error(response, 405)["code"] == "method_not_allowed"
    assert response.headers["allow"] == allow
    simulated = httpx.request("PUT", f"{sim.url}/v1/chat/completions")
    assert simulated.status_code == 405 and simulated.headers["allow"] == "POST"


@pytest.mark.parametrize("seed", ["36700000000000000000000", "18446744073709551616"])
def test_a_seed_beyond_64_bits_gets_a_clear_message(gateway: ServerThread, seed: str) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", content=_chat_with("seed", seed))
    error = _error(response, 400)
    assert error["param"] == "seed" and error["code"] == "integer_out_of_range"
    assert "64 bits" in error["message"] and "e+" not in error["message"]


def _raw_exchange(url: str, request: bytes) -> tuple[bytes, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 3\r\n\r\n{}",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHo st: x\r\n\r\n",
    ],
)
def test_unparseable_requests_get_the_openai_error_shape(
    gateway: ServerThread, request_bytes: bytes
) -> None:
    head, body = _raw_exchange(gateway.url, request_bytes)
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"content-type: application/json" in head.lower()
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_http_request"


def test_hasten_serve_answers_unparseable_requests_in_the_openai_shape() -> None:
    with GatewayProcess("--simulator", "--no-cache") as gateway:
        request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n"
        head, body = _raw_exchange(gateway.url, request)
    assert head.startswith(b"HTTP/1.1 400 ") and b"application/json" in head
    assert orjson.loads(body)["error"]["code"] == "invalid_http_request"

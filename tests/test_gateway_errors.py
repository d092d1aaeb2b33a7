"""Bad input and upstream failures: OpenAI-shaped errors with the right status, no tracebacks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hasten.config import TimeoutConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread, free_port


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    config = make_config({"sim": sim.url + "/v1"}, models=("sim-model",), max_body_bytes=4096)
    with running_gateway(config) as server:
        yield server


def _assert_error(
    response: httpx.Response, status: int, param: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert response.headers["x-hasten-cache"] == "bypass"
    assert response.headers["server-timing"].startswith("hasten;dur=")
    assert response.headers["x-hasten-request-id"]
    assert response.headers["content-type"] == "application/json"
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    if param is not None:
        assert error["param"] == param
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": 3, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "sim-model"}, "messages"),
        ({"model": "sim-model", "messages": "hi"}, "messages"),
        ({"model": "sim-model", "messages": [{"content": "x"}]}, "messages[0].role"),
        ({**chat_body(), "temperature": "hot"}, "temperature"),
        ({**chat_body(), "stream": "yes"}, "stream"),
        ({**chat_body(), "n": 0}, "n"),
        ({**chat_body(), "max_tokens": -1}, "max_tokens"),
    ],
)
def test_invalid_fields_name_the_param(
    gateway: ServerThread, body: dict[str, Any], param: str
) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
    _assert_error(response, 400, param)


def test_malformed_json_is_400(gateway: ServerThread) -> None:
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert _assert_error(response, 400)["code"] == "invalid_json"
    response = httpx.post(f"{gateway.url}/v1/chat/completions", content=b"[1, 2]")
    _assert_error(response, 400)


def test_body_over_limit_is_413(gateway: ServerThread) -> None:
    big = chat_body("x" * 10_000)
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=big)
    _assert_error(response, 413)


def test_chunked_body_over_limit_is_413(gateway: ServerThread) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    response = httpx.post(f"{gateway.url}/v1/chat/completions", content=chunks())
    _assert_error(response, 413)


def test_unknown_model_is_404(gateway: ServerThread) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={**chat_body(), "model": "x"})
    assert _assert_error(response, 404, "model")["code"] == "model_not_found"


def test_unknown_path_and_wrong_method(gateway: ServerThread) -> None:
    _assert_error(httpx.get(f"{gateway.url}/v1/nothing"), 404)
    _assert_error(httpx.get(f"{gateway.url}/v1/chat/completions"), 405)


def test_gateway_keys(sim: ServerThread) -> None:
    config = make_config({"sim": sim.url + "/v1"}, api_keys=[("team-a", "key-a")])
    with running_gateway(config) as gateway:
        url = f"{gateway.url}/v1/chat/completions"
        _assert_error(httpx.post(url, json=chat_body()), 401)
        _assert_error(
            httpx.post(url, json=chat_body(), headers={"authorization": "Bearer no"}), 401
        )
        ok = httpx.post(url, json=chat_body(), headers={"authorization": "Bearer key-a"})
        assert ok.status_code == 200
        assert "key-a" not in ok.text


def test_unreachable_upstream_is_502() -> None:
    config = make_config({"down": f"http://127.0.0.1:{free_port()}/v1"})
    with running_gateway(config) as gateway:
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body())
        _assert_error(response, 502)


def test_upstream_timeout_is_504() -> None:
    slow = SimConfig(ttft_base_ms=3000)
    with ServerThread(build_app(slow)) as sim:
        config = make_config(
            {"sim": sim.url + "/v1"}, timeouts=TimeoutConfig(first_byte_s=0.2, total_s=5)
        )
        with running_gateway(config) as gateway:
            response = httpx.post(
                f"{gateway.url}/v1/chat/completions", json=chat_body(), timeout=10
            )
            _assert_error(response, 504)


def test_health_and_ready(gateway: ServerThread) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"

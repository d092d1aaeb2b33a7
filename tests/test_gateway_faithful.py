"""What the client wrote is what hasten reads, keys and forwards (issue 41, defects 7, 8, 9
and 11): integers of any size reach the upstream as written and key apart, a key written
twice is a 400 on every API, the headers and key orders that change an answer change its
cache entry, and a body too large to work on is refused before it is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from hasten.config import GatewayConfig
from hasten.config.keys_table import KeysConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import BodyRecorder, chat_body, make_config, running_gateway
from tests.support.servers import ServerThread

ADMIN_KEY = "faithful-admin-key"


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ServerThread, BodyRecorder]]:
    recorder = BodyRecorder(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0)))
    with ServerThread(recorder) as server:
        yield server, recorder


def _config(upstream: ServerThread, **server: Any) -> GatewayConfig:
    config = make_config({"sim": upstream.url + "/v1"}, admin_api_key=ADMIN_KEY)
    return replace(config, server=replace(config.server, **server))


@pytest.fixture(scope="module")
def gateway(upstream: tuple[ServerThread, BodyRecorder]) -> Iterator[ServerThread]:
    with running_gateway(_config(upstream[0])) as server:
        yield server


def _post(
    gateway: ServerThread, raw: bytes, path: str = "/v1/chat/completions", **headers: str
) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(f"{gateway.url}{path}", content=raw, headers=headers, timeout=30)


def _chat_raw(extra: str, content: str = "hi") -> bytes:
    return (
        '{"model": "sim-model", "temperature": 0, '
        f'"messages": [{{"role": "user", "content": "{content}"}}]{extra}}}'
    ).encode()


# --- defect 7: integers beyond 64 bits ------------------------------------------------------


@pytest.mark.parametrize("is_stream", [False, True])
def test_an_integer_beyond_64_bits_reaches_upstream_as_written(
    gateway: ServerThread, upstream: tuple[ServerThread, BodyRecorder], is_stream: bool
) -> None:
    # A non-stream request is re-serialised (asked upstream as a stream), a stream one gets
    # stream_options added for the cache: both used to write 1.1805916207174113e+21.
    stream = ', "stream": true' if is_stream else ""
    raw = _chat_raw(f', "x_big": 1180591620717411303424{stream}', f"big {is_stream}")
    response = _post(gateway, raw)
    assert response.status_code == 200, response.text
    sent = upstream[1].bodies[-1]
    assert b'"x_big":1180591620717411303424' in sent, sent
    assert orjson.loads(sent.replace(b"1180591620717411303424", b"0"))["x_big"] == 0


def test_integers_beyond_64_bits_key_apart(gateway: ServerThread) -> None:
    first = _post(gateway, _chat_raw(', "x_big": 1180591620717411303424', "keyed apart"))
    second = _post(gateway, _chat_raw(', "x_big": 1180591620717411303425', "keyed apart"))
    again = _post(gateway, _chat_raw(', "x_big": 1180591620717411303425', "keyed apart"))
    labels = [r.headers["x-hasten-cache"] for r in (first, second, again)]
    assert labels == ["miss", "miss", "hit"]


# --- defect 8: duplicate keys ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "raw", "key"),
    [
        (
            "/v1/chat/completions",
            b'{"model": "expensive", "model": "sim-model", "messages": [{"role": "user"}]}',
            "model",
        ),
        ("/v1/completions", b'{"model": "sim-model", "prompt": "a", "prompt": "b"}', "prompt"),
        ("/v1/embeddings", b'{"model": "sim-model", "input": {"a": 1, "a": 2}}', "a"),
        ("/admin/cache/invalidate", b'{"key": "a", "key": "b"}', "key"),
    ],
)
def test_a_key_written_twice_is_a_400_naming_it_on_every_api(
    gateway: ServerThread, path: str, raw: bytes, key: str
) -> None:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"} if path.startswith("/admin") else {}
    response = _post(gateway, raw, path, **headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "duplicate_key" and error["param"] == key
    assert f"'{key}'" in error["message"]


def test_a_key_written_twice_is_a_400_on_the_keys_api(
    upstream: tuple[ServerThread, BodyRecorder],
) -> None:
    config = replace(_config(upstream[0]), keys=KeysConfig(is_enabled=True))
    with running_gateway(config) as gateway:
        raw = b'{"tenant": "t", "models": ["a"], "tenant": "u"}'
        response = _post(gateway, raw, "/admin/keys", authorization=f"Bearer {ADMIN_KEY}")
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "tenant"


def test_a_duplicate_key_never_reaches_upstream(
    gateway: ServerThread, upstream: tuple[ServerThread, BodyRecorder]
) -> None:
    before = len(upstream[1].bodies)
    raw = b'{"model": "sim-model", "messages": [{"role": "user", "content": "x", "content": "y"}]}'
    assert _post(gateway, raw).status_code == 400
    assert len(upstream[1].bodies) == before


# --- defect 9: what the upstream answers differently is keyed apart ---------------------------


@pytest.mark.parametrize("name", ["openai-organization", "openai-project", "openai-beta"])
def test_a_forwarded_header_that_changes_the_answer_changes_the_entry(
    gateway: ServerThread, name: str
) -> None:
    raw = _chat_raw("", f"header {name}")
    labels = [
        _post(gateway, raw, **{name: value}).headers["x-hasten-cache"]
        for value in ("a", "b", "a", "b")
    ]
    assert labels == ["miss", "miss", "hit", "hit"]
    assert _post(gateway, raw).headers["x-hasten-cache"] == "miss"  # without the header


def test_a_json_schemas_property_order_changes_the_entry(gateway: ServerThread) -> None:
    def schema(order: str) -> str:
        properties = ", ".join(f'"{name}": {{"type": "string"}}' for name in order)
        return (
            ', "response_format": {"type": "json_schema", "json_schema": {"name": "s", '
            f'"strict": true, "schema": {{"type": "object", "properties": {{{properties}}}}}}}}}'
        )

    labels = [
        _post(gateway, _chat_raw(schema(order), "schema order")).headers["x-hasten-cache"]
        for order in ("ba", "ab", "ba")
    ]
    assert labels == ["miss", "miss", "hit"]


def test_the_order_of_a_messages_fields_is_still_one_entry(gateway: ServerThread) -> None:
    first = _post(gateway, _chat_raw("", "field order"))
    swapped = (
        b'{"temperature": 0, "messages": [{"content": "field order", "role": "user"}], '
        b'"model": "sim-model"}'
    )
    assert first.headers["x-hasten-cache"] == "miss"
    assert _post(gateway, swapped).headers["x-hasten-cache"] == "hit"


# --- defect 11: a body too large to work on ---------------------------------------------------


def test_more_messages_than_max_messages_is_a_400(
    upstream: tuple[ServerThread, BodyRecorder],
) -> None:
    with running_gateway(_config(upstream[0], max_messages=50)) as gateway:
        body = chat_body()
        body["messages"] = [{"role": "user", "content": "m"}] * 51
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "messages" and error["code"] == "too_many_items"
        body["messages"] = body["messages"][:50]
        ok = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
        assert ok.status_code == 200, ok.text


def test_the_default_bound_refuses_300_000_messages(gateway: ServerThread) -> None:
    body = chat_body()
    body["messages"] = [{"role": "user", "content": "m"}] * 300_000
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "too_many_items"


def test_a_large_body_worked_on_off_the_loop_is_answered(gateway: ServerThread) -> None:
    # Over OFF_LOOP_BYTES: parsed, checked and keyed on the parser thread, then served.
    body = chat_body("large " + "x" * 400_000)
    first = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    second = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert first.status_code == 200, first.text
    assert [first.headers["x-hasten-cache"], second.headers["x-hasten-cache"]] == ["miss", "hit"]
    bad = httpx.post(f"{gateway.url}/v1/chat/completions", json={**body, "n": "two"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "n"

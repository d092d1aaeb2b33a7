"""/admin/keys through the real HTTP stack: create, list, read, patch, rotate, revoke; the
keys' use on model requests, their allowed models, and secrets kept out of every log."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hasten.config import GatewayConfig
from hasten.config.keys_table import KeysConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread

ADMIN_KEY = "admin-key-for-virtual-keys-tests"
STATIC_KEY = "static-key-of-team-static"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as server:
        yield server


def _config(sim: ServerThread, keys: KeysConfig | None = None) -> GatewayConfig:
    config = make_config(
        {"sim": sim.url + "/v1"},
        api_keys=[("team-static", STATIC_KEY)],
        admin_api_key=ADMIN_KEY,
        models=("sim-model", "other-model"),
        aliases={"sim-alias": "sim-model"},
    )
    server = replace(config.server, log_format="json", log_level="debug")
    return replace(config, server=server, keys=keys or KeysConfig(is_enabled=True, max_keys=20))


@pytest.fixture(scope="module")
def gateway(sim: ServerThread) -> Iterator[ServerThread]:
    with running_gateway(_config(sim)) as server:
        yield server


def _bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def _create(url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{url}/admin/keys", json={"tenant": "team-v", **body}, headers=ADMIN)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    created: dict[str, Any] = response.json()
    return created


def _chat(url: str, secret: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=chat_body(**extra), headers=_bearer(secret), timeout=30
    )


def test_create_use_list_get(gateway: ServerThread) -> None:
    created = _create(gateway.url, name="ci bot", limits={"requests_per_minute": 50})
    secret = created["secret"]
    assert secret.startswith("hsk_") and created["id"].startswith("vk_")
    assert created["secret_hint"] == "hsk_..." + secret[-4:]
    assert created["limits"]["requests_per_minute"] == 50
    assert _chat(gateway.url, secret).status_code == 200
    listed = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN)
    assert listed.status_code == 200 and secret not in listed.text
    ids = [item["id"] for item in listed.json()["data"]]
    assert created["id"] in ids and listed.json()["store"] == "memory"
    cache = listed.json()["cache"]
    assert cache["known"] >= 1 and cache["store_lookups"] >= 1
    mine = httpx.get(f"{gateway.url}/admin/keys?tenant=team-v", headers=ADMIN).json()["data"]
    assert mine and {item["tenant"] for item in mine} == {"team-v"}
    other = httpx.get(f"{gateway.url}/admin/keys", params={"tenant": "nobody"}, headers=ADMIN)
    assert other.json()["data"] == []
    one = httpx.get(f"{gateway.url}/admin/keys/{created['id']}", headers=ADMIN)
    assert one.status_code == 200 and "secret" not in one.json()
    assert {k: v for k, v in created.items() if k != "secret"} == one.json()


def test_rotate_then_revoke(gateway: ServerThread) -> None:
    created = _create(gateway.url)
    old = created["secret"]
    rotated = httpx.post(f"{gateway.url}/admin/keys/{created['id']}/rotate", headers=ADMIN)
    assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
    new = rotated.json()["secret"]
    assert new != old and rotated.json()["revision"] == 2
    refused = _chat(gateway.url, old)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert _chat(gateway.url, new).status_code == 200
    revoked = httpx.delete(f"{gateway.url}/admin/keys/{created['id']}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert _chat(gateway.url, new).status_code == 401
    again = httpx.delete(f"{gateway.url}/admin/keys/{created['id']}", headers=ADMIN)
    assert again.status_code == 200  # revoking twice: still revoked, no error
    rotate = httpx.post(f"{gateway.url}/admin/keys/{created['id']}/rotate", headers=ADMIN)
    assert rotate.status_code == 409 and rotate.json()["error"]["code"] == "key_revoked"


def test_allowed_models(gateway: ServerThread) -> None:
    secret = _create(gateway.url, models=["sim-model"])["secret"]
    assert _chat(gateway.url, secret).status_code == 200
    assert _chat(gateway.url, secret, model="sim-alias").status_code == 200  # its alias
    refused = _chat(gateway.url, secret, model="other-model")
    assert refused.status_code == 404
    assert refused.json()["error"] == {
        "message": "The model `other-model` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    missing = _chat(gateway.url, secret, model="other-model-that-does-not-exist")
    assert missing.status_code == 404  # a model that does not exist: the very same answer
    assert missing.json()["error"]["message"] == refused.json()["error"]["message"].replace(
        "other-model", "other-model-that-does-not-exist"
    )
    listed = httpx.get(f"{gateway.url}/v1/models", headers=_bearer(secret)).json()
    assert sorted(item["id"] for item in listed["data"]) == ["sim-alias", "sim-model"]
    everything = httpx.get(f"{gateway.url}/v1/models", headers=_bearer(STATIC_KEY)).json()
    assert {item["id"] for item in everything["data"]} >= {"other-model", "sim-model"}


def test_patch_changes_models_and_limits_at_once(gateway: ServerThread) -> None:
    created = _create(gateway.url, models=["sim-model"])
    secret = created["secret"]
    assert _chat(gateway.url, secret, model="other-model").status_code == 404
    patched = httpx.patch(
        f"{gateway.url}/admin/keys/{created['id']}",
        json={"models": None, "limits": {"max_concurrent": 2}, "name": "renamed"},
        headers=ADMIN,
    )
    assert patched.status_code == 200, patched.text
    shown = patched.json()
    assert (shown["models"], shown["name"], shown["limits"]["max_concurrent"]) == (
        None,
        "renamed",
        2,
    )
    assert _chat(gateway.url, secret, model="other-model").status_code == 200


def test_a_narrowed_key_is_refused_the_very_request_it_sent_before(gateway: ServerThread) -> None:
    # The same bytes again take the front kept for them (hasten.proxy.fronts), and the key's
    # models are still checked on each request; a second key of the tenant shares the front.
    created = _create(gateway.url)
    other = _create(gateway.url, models=["sim-model"])["secret"]
    for _ in range(2):
        answered = _chat(gateway.url, created["secret"], model="other-model", temperature=0)
        assert answered.status_code == 200
    assert _chat(gateway.url, other, model="other-model", temperature=0).status_code == 404
    patched = httpx.patch(
        f"{gateway.url}/admin/keys/{created['id']}", json={"models": ["sim-model"]}, headers=ADMIN
    )
    assert patched.status_code == 200, patched.text
    refused = _chat(gateway.url, created["secret"], model="other-model", temperature=0)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


def test_who_may_manage_keys(gateway: ServerThread) -> None:
    secret = _create(gateway.url)["secret"]
    url = f"{gateway.url}/admin/keys"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers=_bearer("no-such-key")).status_code == 401
    for tenant_key in (STATIC_KEY, secret):
        forbidden = httpx.get(url, headers=_bearer(tenant_key))
        assert forbidden.status_code == 403, forbidden.text
        assert forbidden.json()["error"]["type"] == "permission_error"
    # A virtual key is a tenant key: tenant-scoped admin calls work, in its own namespace.
    stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=_bearer(secret))
    assert stats.status_code == 200 and stats.json()["tenant"] == "team-v"
    stats = httpx.get(f"{gateway.url}/stats", headers=_bearer(secret))
    assert stats.status_code == 200 and stats.json()["tenant"] == "team-v"
    metrics = httpx.get(f"{gateway.url}/metrics", headers=_bearer(secret))
    assert metrics.status_code == 403, metrics.text
    # The admin key is not a model key, and neither is a made-up one.
    assert _chat(gateway.url, ADMIN_KEY).status_code == 401
    assert _chat(gateway.url, "hsk_" + "x" * 43).status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/admin/keys", {}, 400, "missing_required_parameter"),
        (
            "POST",
            "/admin/keys",
            {"tenant": "t", "limits": {"budget_usd": -1}},
            400,
            "invalid_value",
        ),
        ("POST", "/admin/keys", {"tenant": "t", "models": ["m"] * 300}, 400, "invalid_value"),
        ("POST", "/admin/keys", {"tenant": "t", "secret": "mine"}, 400, "unknown_parameter"),
        ("PUT", "/admin/keys", None, 405, "method_not_allowed"),
        ("GET", "/admin/keys/vk_0000000000000000", None, 404, "key_not_found"),
        ("GET", "/admin/keys/not-an-id", None, 404, "key_not_found"),
        ("POST", "/admin/keys/vk_0000000000000000", {}, 405, "method_not_allowed"),
        ("GET", "/admin/keys/vk_0000000000000000/rotate", None, 405, "method_not_allowed"),
        ("POST", "/admin/keys/vk_0000000000000000/other", {}, 404, "unknown_url"),
        ("PATCH", "/admin/keys/vk_0000000000000000", {}, 400, "missing_required_parameter"),
    ],
)
def test_bad_requests_are_openai_shaped(
    gateway: ServerThread, method: str, path: str, body: Any, status: int, code: str
) -> None:
    response = httpx.request(method, gateway.url + path, json=body, headers=ADMIN)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and set(error) == {"message", "type", "param", "code"}


def test_invalid_json_body(gateway: ServerThread) -> None:
    response = httpx.post(f"{gateway.url}/admin/keys", content=b"{nope", headers=ADMIN)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    big = httpx.post(
        f"{gateway.url}/admin/keys", content=b'{"tenant":"' + b"x" * 70_000 + b'"}', headers=ADMIN
    )
    assert big.status_code == 413


def test_max_keys_is_enforced(sim: ServerThread) -> None:
    with running_gateway(_config(sim, KeysConfig(is_enabled=True, max_keys=2))) as gateway:
        _create(gateway.url)
        _create(gateway.url)
        full = httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "t"}, headers=ADMIN)
        assert full.status_code == 409 and full.json()["error"]["code"] == "max_keys_reached"


def test_keys_off(sim: ServerThread) -> None:
    with running_gateway(_config(sim, KeysConfig(is_enabled=False))) as gateway:
        off = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN)
        assert off.status_code == 404 and off.json()["error"]["code"] == "virtual_keys_disabled"


def test_the_openai_sdk_with_a_created_key(gateway: ServerThread) -> None:
    created = _create(gateway.url, models=["sim-model"])
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=created["secret"], max_retries=0)
    answer = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "sdk"}], temperature=0
    )
    assert answer.choices[0].message.content
    stream = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "sdk"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert sorted(m.id for m in client.models.list()) == ["sim-alias", "sim-model"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="other-model", messages=[{"role": "user", "content": "x"}]
        )
    httpx.delete(f"{gateway.url}/admin/keys/{created['id']}", headers=ADMIN)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "x"}]
        )


def test_secrets_never_reach_a_log(sim: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG), running_gateway(_config(sim)) as gateway:
        created = _create(gateway.url, name="logged")
        first = created["secret"]
        assert _chat(gateway.url, first).status_code == 200
        second = httpx.post(f"{gateway.url}/admin/keys/{created['id']}/rotate", headers=ADMIN)
        assert _chat(gateway.url, first).status_code == 401
        assert _chat(gateway.url, second.json()["secret"]).status_code == 200
        httpx.delete(f"{gateway.url}/admin/keys/{created['id']}", headers=ADMIN)
        listed = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN).text
    text = caplog.text + "".join(str(vars(record)) for record in caplog.records)
    assert f"virtual key {created['id']} rotated" in caplog.text  # the log did record
    for secret in (first, second.json()["secret"]):
        assert secret not in text and secret not in listed
        assert secret[4:] not in text
    assert ADMIN_KEY not in text


def test_sqlite_keys_survive_a_restart(sim: ServerThread, tmp_path: Path) -> None:
    keys = KeysConfig(is_enabled=True, store="sqlite", sqlite_path=str(tmp_path / "k.sqlite3"))
    with running_gateway(_config(sim, keys)) as gateway:
        created = _create(gateway.url)
        revoked = _create(gateway.url)
        httpx.delete(f"{gateway.url}/admin/keys/{revoked['id']}", headers=ADMIN)
    with running_gateway(_config(sim, keys)) as gateway:
        assert _chat(gateway.url, created["secret"]).status_code == 200
        assert _chat(gateway.url, revoked["secret"]).status_code == 401
        listed = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN).json()
        assert listed["store"] == "sqlite"
        assert [item["id"] for item in listed["data"]] == [created["id"], revoked["id"]]


class HeaderRecorder:
    """ASGI middleware in front of the simulator: keeps every request's authorization."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.authorizations: list[bytes | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.authorizations.append(dict(scope["headers"]).get(b"authorization"))
        await self.app(scope, receive, send)


def test_a_virtual_secret_never_goes_upstream() -> None:
    recorder = HeaderRecorder(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0)))
    with ServerThread(recorder) as upstream, running_gateway(_config(upstream)) as gateway:
        secret = _create(gateway.url)["secret"]
        assert _chat(gateway.url, secret, stream=True).status_code == 200
        assert _chat(gateway.url, secret).status_code == 200
    assert recorder.authorizations  # the upstream was called
    assert all(secret.encode() not in (value or b"") for value in recorder.authorizations)


def test_a_damaged_row_is_refused_by_the_gateway(
    sim: ServerThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "k.sqlite3"
    keys = KeysConfig(is_enabled=True, store="sqlite", sqlite_path=str(path))
    with running_gateway(_config(sim, keys)) as gateway:
        damaged, sound = _create(gateway.url), _create(gateway.url)
    with sqlite3.connect(path) as conn:
        (raw,) = conn.execute(
            "SELECT record FROM virtual_keys WHERE id = ?", (damaged["id"],)
        ).fetchone()
        edited = bytes(raw).replace(b'"tenant":"team-v"', b'"tenant":"team-x"')
        conn.execute("UPDATE virtual_keys SET record = ? WHERE id = ?", (edited, damaged["id"]))
    with caplog.at_level(logging.WARNING), running_gateway(_config(sim, keys)) as gateway:
        refused = _chat(gateway.url, damaged["secret"])
        assert refused.status_code == 401, refused.text
        assert _chat(gateway.url, sound["secret"]).status_code == 200
        one = httpx.get(f"{gateway.url}/admin/keys/{damaged['id']}", headers=ADMIN)
        assert one.status_code == 500 and one.json()["error"]["code"] == "key_record_damaged"
        listed = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN).json()
        assert [item["id"] for item in listed["data"]] == [sound["id"]]
        assert listed["cache"]["damaged_refused"] == 1
    assert "checksum mismatch" in caplog.text
    assert damaged["secret"] not in caplog.text

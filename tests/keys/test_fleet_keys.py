"""Two gateways sharing one Redis (``[fleet] redis_url``): a key created on one works on the
other, a revocation or rotation on one is refused by the other within a bounded wait, and
with Redis gone a replica keeps serving the keys it knew (a key it never saw gets a 503)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import redis

from hasten.config import GatewayConfig
from hasten.config.fleet import FleetConfig
from hasten.config.keys_table import KeysConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread, redis_server

ADMIN_KEY = "fleet-admin-key-for-virtual-keys"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
MAX_WAIT_S = 10.0  # the bound; cache_ttl_s (1 s) is when it should happen


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as server:
        yield server


def _config(sim: ServerThread, redis_url: str, prefix: str) -> GatewayConfig:
    config = make_config({"sim": sim.url + "/v1"}, admin_api_key=ADMIN_KEY)
    fleet = FleetConfig(redis_url=redis_url, key_prefix=prefix)
    return replace(config, fleet=fleet, keys=KeysConfig(is_enabled=True, store="redis"))


def _chat(url: str, secret: str) -> int:
    headers = {"authorization": f"Bearer {secret}"}
    body = chat_body(f"fleet {uuid.uuid4().hex}")
    return httpx.post(
        f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30
    ).status_code


def _until(check: Any) -> float:
    """Seconds until ``check()`` holds; fails after MAX_WAIT_S."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < MAX_WAIT_S, "not seen within the bound"
        time.sleep(0.05)
    return time.monotonic() - started


def _create(url: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/admin/keys", json={"tenant": "fleet-t"}, headers=ADMIN)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_create_on_a_use_on_b_revoke_on_a(sim: ServerThread, redis_url: str) -> None:
    config = _config(sim, redis_url, f"test:{uuid.uuid4().hex}:")
    with running_gateway(config) as a, running_gateway(config) as b:
        created = _create(a.url)
        assert _chat(b.url, created["secret"]) == 200
        listed = httpx.get(f"{b.url}/admin/keys", headers=ADMIN).json()
        assert [item["id"] for item in listed["data"]] == [created["id"]]
        assert listed["store"] == "redis"
        rotated = httpx.post(f"{a.url}/admin/keys/{created['id']}/rotate", headers=ADMIN).json()
        _until(lambda: _chat(b.url, created["secret"]) == 401)  # the old secret, on B
        assert _chat(b.url, rotated["secret"]) == 200
        assert httpx.delete(f"{a.url}/admin/keys/{created['id']}", headers=ADMIN).is_success
        assert _chat(a.url, rotated["secret"]) == 401  # at once on the replica that revoked
        _until(lambda: _chat(b.url, rotated["secret"]) == 401)


def test_redis_lost_while_serving(sim: ServerThread) -> None:
    with redis_server() as url, running_gateway(_config(sim, url, "test:lost:")) as gateway:
        known = _create(gateway.url)["secret"]
        never_seen = _create(gateway.url)["secret"]
        assert _chat(gateway.url, known) == 200
        _shut_down(url)
        assert _chat(gateway.url, known) == 200  # known to this replica: still served
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=chat_body("x"),
            headers={"authorization": f"Bearer {never_seen}"},
        )
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "key_store_unavailable"
        down = httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "t"}, headers=ADMIN)
        assert down.status_code == 503


def _shut_down(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with contextlib.suppress(redis.ConnectionError):  # it hangs up as it exits
        client.shutdown(nosave=True)
    client.close()

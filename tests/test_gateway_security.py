"""Who may call what: gateway keys, tenant keys and the admin key, against a live gateway.

Each test names the defect of issue 10 it guards (4: open endpoints, 5: global admin stats,
6: cross-tenant invalidation, 7: an admin API open to anyone).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hasten.app import HastenApp
from hasten.cache import cache_key
from hasten.config import GatewayConfig
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway, sim_stats
from tests.support.servers import GatewayProcess, ServerThread

ADMIN_KEY = "admin-secret-key"
KEYS = (("team-a", "key-a"), ("team-b", "key-b"))
QUESTION = "What is 2+2?"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture()
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(models=("sim-model",)))) as server:
        yield server


def _config(sim: ServerThread, *, keys: Any = KEYS, admin: str | None = ADMIN_KEY) -> GatewayConfig:
    return make_config({"sim": sim.url + "/v1"}, api_keys=keys, admin_api_key=admin)


def _chat(gateway: ServerThread, key: str | None, content: str = QUESTION) -> httpx.Response:
    headers = bearer(key) if key else {}
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=chat_body(content), headers=headers
    )


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


class _Engine:
    """The engine supervisor's status, as /readyz reads it (no child process needed)."""

    def status(self) -> dict[str, object]:
        return {"state": "ready", "pid": 1}


# --- 4: with gateway keys, only /healthz and a bare /readyz are open ----------------------


def test_keyless_caller_sees_only_health_and_a_bare_readyz(sim: ServerThread) -> None:
    app = HastenApp(_config(sim), engine=_Engine())
    with ServerThread(app, lifespan="on") as gateway:
        assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{gateway.url}/readyz").json() == {"status": "ready"}
        for path in ("/stats", "/v1/models", "/models", "/admin/cache/stats", "/admin/routing"):
            assert _error(httpx.get(f"{gateway.url}{path}"), 401)["type"] == "authentication_error"
        for path in ("/admin/cache/invalidate", "/admin/cache/import", "/admin/cache/report"):
            _error(httpx.post(f"{gateway.url}{path}", content=b"{}"), 401)
        _error(httpx.get(f"{gateway.url}/readyz", headers=bearer("wrong")), 401)
        # A keyless /v1/models never costs an upstream call made with the operator's key.
        assert sim_stats(sim.url)["num_requests"] == 0


def test_keyed_views_of_readyz_stats_and_models(sim: ServerThread) -> None:
    app = HastenApp(_config(sim), engine=_Engine())
    with ServerThread(app, lifespan="on") as gateway:
        assert _chat(gateway, "key-a").status_code == 200
        tenant_ready = httpx.get(f"{gateway.url}/readyz", headers=bearer("key-b")).json()
        assert tenant_ready == {"status": "ready", "engine": {"state": "ready", "pid": 1}}
        admin_ready = httpx.get(f"{gateway.url}/readyz", headers=bearer(ADMIN_KEY)).json()
        assert admin_ready["engine"]["state"] == "ready" and admin_ready["cache"]["enabled"]
        # A tenant's /stats holds its own counts only, never another tenant's.
        stats_b = httpx.get(f"{gateway.url}/stats", headers=bearer("key-b")).json()
        assert stats_b == {"tenant": "team-b", "requests": {}}
        stats_a = httpx.get(f"{gateway.url}/stats", headers=bearer("key-a")).json()
        assert stats_a["tenant"] == "team-a" and stats_a["requests"]["miss"] == 1
        everyone = httpx.get(f"{gateway.url}/stats", headers=bearer(ADMIN_KEY)).json()
        assert everyone["requests"]["miss"] == 1 and "cache" in everyone
        models = httpx.get(f"{gateway.url}/v1/models", headers=bearer("key-b"))
        assert models.status_code == 200 and models.json()["object"] == "list"


def test_body_is_not_validated_before_the_key(sim: ServerThread) -> None:
    with running_gateway(_config(sim)) as gateway:
        url = f"{gateway.url}/v1/chat/completions"
        error = _error(httpx.post(url, json={"model": 3}), 401)
        assert "param" not in error["message"] and error["param"] is None
        _error(httpx.post(url, content=b"{not json"), 401)
        assert _error(httpx.post(url, json={"model": 3}, headers=bearer("key-a")), 400)


# --- 5: /admin/cache/stats is per tenant for a tenant key ---------------------------------


def test_admin_stats_are_per_tenant_for_a_tenant_key(sim: ServerThread) -> None:
    with running_gateway(_config(sim)) as gateway:
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "miss"
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "hit"
        assert _chat(gateway, "key-b", "another question").headers["x-hasten-cache"] == "miss"
        url = f"{gateway.url}/admin/cache/stats"
        a = httpx.get(url, headers=bearer("key-a")).json()
        b = httpx.get(url, headers=bearer("key-b")).json()
        assert a["tenant"] == "team-a" and (a["requests"]["hit"], a["requests"]["miss"]) == (1, 1)
        assert b["tenant"] == "team-b" and b["requests"] == {"miss": 1, "upstream_calls": 1}
        assert "exact" not in a and "exact" not in b  # the global tiers are the admin's view
        everyone = httpx.get(url, headers=bearer(ADMIN_KEY)).json()
        assert everyone["exact"]["l1_hits"] == 1 and everyone["exact"]["misses"] == 2


# --- 6: a key names only entries of the caller's namespace -------------------------------


def test_a_tenant_cannot_evict_another_tenants_entry(sim: ServerThread) -> None:
    with running_gateway(_config(sim)) as gateway:
        first = _chat(gateway, "key-a")
        assert first.headers["x-hasten-cache"] == "miss"
        request_key = first.headers["x-hasten-cache-key"]
        # Everything B could compute or learn: A's stored key and the tenant-free request key.
        stored_key = cache_key(
            chat_body(QUESTION), endpoint="chat", model="sim-model", tenant="team-a"
        )
        url = f"{gateway.url}/admin/cache/invalidate"
        for key in (stored_key, request_key):
            tried = httpx.post(url, json={"key": key}, headers=bearer("key-b"))
            assert tried.status_code == 200
            assert tried.json()["exact_deleted"] == 0  # nothing of B's was there
        _error(
            httpx.post(url, json={"key": request_key, "tenant": "team-a"}, headers=bearer("key-b")),
            403,
        )
        _error(httpx.post(url, json={"all_tenants": True}, headers=bearer("key-b")), 403)
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "hit"
        # A names its own entry with the key it was given, and only then is it gone.
        gone = httpx.post(url, json={"key": request_key}, headers=bearer("key-a"))
        assert gone.json()["exact_deleted"] == 1
        again = httpx.post(url, json={"key": request_key}, headers=bearer("key-a"))
        assert again.json()["exact_deleted"] == 0  # says whether anything was there
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "miss"


def test_the_admin_key_invalidates_in_the_tenant_it_names(sim: ServerThread) -> None:
    with running_gateway(_config(sim)) as gateway:
        request_key = _chat(gateway, "key-a").headers["x-hasten-cache-key"]
        url = f"{gateway.url}/admin/cache/invalidate"
        error = _error(httpx.post(url, json={"key": request_key}, headers=bearer(ADMIN_KEY)), 400)
        assert error["param"] == "tenant"
        body = {"key": request_key, "tenant": "team-a"}
        assert httpx.post(url, json=body, headers=bearer(ADMIN_KEY)).status_code == 200
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "miss"


# --- 7: an admin key, separate from tenant keys; without one the admin API is off --------

POISON = b'{"question": "What is 2+2?", "answer": "5 (POISONED)", "model": "sim-model"}\n'


def test_without_an_admin_key_the_admin_api_is_off(sim: ServerThread) -> None:
    with running_gateway(_config(sim, keys=(), admin=None)) as gateway:
        response = httpx.post(f"{gateway.url}/admin/cache/import", content=POISON)
        error = _error(response, 403)
        assert error["code"] == "admin_api_disabled"
        assert (
            "HASTEN_ADMIN_API_KEY" in error["message"] and "admin_api_key_env" in error["message"]
        )
        for path in ("/admin/cache/stats", "/admin/routing"):
            _error(httpx.get(f"{gateway.url}{path}", headers=bearer("any-key")), 403)
        reply = _chat(gateway, None)
        assert reply.headers["x-hasten-cache"] == "miss"
        assert "POISONED" not in reply.text
        # Keyless behaviour otherwise stays: /stats and /readyz open, with the cache state.
        assert httpx.get(f"{gateway.url}/stats").json()["requests"]["miss"] == 1
        assert "cache" in httpx.get(f"{gateway.url}/readyz").json()


def test_the_admin_key_opens_the_admin_api_and_nothing_else(sim: ServerThread) -> None:
    with running_gateway(_config(sim, keys=())) as gateway:
        url = f"{gateway.url}/admin/cache/import"
        _error(httpx.post(url, content=POISON), 401)
        _error(httpx.post(url, content=POISON, headers=bearer("a-callers-own-key")), 401)
        imported = httpx.post(url, content=POISON, headers=bearer(ADMIN_KEY))
        assert imported.json() == {"imported": 1}
        # The operator's answer serves keyless callers ("public"), not other namespaces.
        assert _chat(gateway, None).headers["x-hasten-cache"] == "hit"
        assert _chat(gateway, "a-callers-own-key").headers["x-hasten-cache"] == "miss"
        # The admin key is never a model key, so it is never forwarded upstream.
        assert "admin key" in _error(_chat(gateway, ADMIN_KEY, "other"), 401)["message"]
        routing = httpx.get(f"{gateway.url}/admin/routing", headers=bearer(ADMIN_KEY))
        assert "*" in routing.json()["models"]


def test_tenant_keys_keep_scoped_calls_but_not_import(sim: ServerThread) -> None:
    with running_gateway(_config(sim, admin=None)) as gateway:
        stats = httpx.get(f"{gateway.url}/admin/cache/stats", headers=bearer("key-a"))
        assert stats.json()["tenant"] == "team-a"
        invalidate = httpx.post(
            f"{gateway.url}/admin/cache/invalidate", json={}, headers=bearer("key-a")
        )
        assert invalidate.status_code == 200
        for method, path in (("POST", "/admin/cache/import"), ("GET", "/admin/routing")):
            response = httpx.request(method, f"{gateway.url}{path}", headers=bearer("key-a"))
            error = _error(response, 403)
            assert (
                error["code"] == "admin_api_disabled" and "HASTEN_ADMIN_API_KEY" in error["message"]
            )


def test_with_both_kinds_of_key_only_the_admin_imports(sim: ServerThread) -> None:
    with running_gateway(_config(sim)) as gateway:
        url = f"{gateway.url}/admin/cache/import"
        error = _error(httpx.post(url, content=POISON, headers=bearer("key-a")), 403)
        assert error["code"] == "permission_denied"
        _error(httpx.post(url, content=POISON, headers=bearer(ADMIN_KEY)), 400)  # whose?
        line = POISON.replace(b'"model"', b'"tenant": "team-a", "model"')
        assert httpx.post(url, content=line, headers=bearer(ADMIN_KEY)).json() == {"imported": 1}
        assert _chat(gateway, "key-a").headers["x-hasten-cache"] == "hit"
        assert _chat(gateway, "key-b").headers["x-hasten-cache"] == "miss"


def _banner(gateway: GatewayProcess) -> str:
    deadline = time.monotonic() + 30
    while "admin API" not in gateway.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    return gateway.stderr


@pytest.mark.parametrize("admin_key", ["", "banner-admin-key"])
def test_serve_banner_says_how_to_enable_the_admin_api(admin_key: str) -> None:
    env = {"HASTEN_ADMIN_API_KEY": admin_key}  # empty counts as unset
    with GatewayProcess("--simulator", "--no-cache", env=env) as gateway:
        banner = _banner(gateway)
        if admin_key:
            assert "admin API: on" in banner and admin_key not in banner
        else:
            assert "admin API: off; to enable it, export HASTEN_ADMIN_API_KEY=" in banner
            off = httpx.get(f"{gateway.url}/admin/cache/stats")
            assert off.status_code == 403 and "HASTEN_ADMIN_API_KEY" in off.text

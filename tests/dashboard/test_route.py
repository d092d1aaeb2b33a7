"""GET /dashboard and /dashboard/data through a real gateway: who may look, and the headers."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from hasten.config.metrics import MetricsConfig
from hasten.dashboard.route import content_security_policy, load_page
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread

ADMIN_KEY = "dash-admin-key-0123456789"


def basic(password: str, user: str = "admin") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=5, decode_ms_per_token=0))) as server:
        yield server


def test_open_without_any_key(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        page = httpx.get(gateway.url + "/dashboard")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.content == load_page()
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["x-content-type-options"] == "nosniff"
        policy = page.headers["content-security-policy"].encode()
        assert policy == content_security_policy(page.content)
        httpx.post(gateway.url + "/v1/chat/completions", json=chat_body("one"), timeout=10)
        data = httpx.get(gateway.url + "/dashboard/data")
        assert data.status_code == 200 and data.headers["cache-control"] == "no-store"
        body = data.json()
        assert body["snapshot"] == 1 and body["is_observing"] is True
        assert body["totals"]["requests"] == 1 and body["window"]["requests"] == 1
        assert [(d["model"], d["deployment"]) for d in body["deployments"]] == [("*", "sim")]
        assert body["cache"]["exact"]["misses"] == 1
        assert httpx.head(gateway.url + "/dashboard").status_code == 200
        assert httpx.get(gateway.url + "/dashboard/data").json()["snapshot"] == 2


def test_the_policy_allows_only_the_pages_own_inline_code() -> None:
    page = load_page()
    policy = content_security_policy(page).decode()
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    # One script and one style, each by hash; no 'unsafe-inline', no origin anywhere.
    assert re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", directives["script-src"])
    assert re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", directives["style-src"])
    assert "unsafe" not in policy and "http" not in policy
    assert b"http://" not in page.replace(b"http://www.w3.org/2000/svg", b"")
    assert b"https://" not in page  # no CDN: the page is self-contained


def test_the_admin_key_as_bearer_or_basic(sim: ServerThread) -> None:
    config = make_config({"sim": sim.url + "/v1"}, admin_api_key=ADMIN_KEY)
    with running_gateway(config) as gateway:
        for path in ("/dashboard", "/dashboard/data"):
            refused = httpx.get(gateway.url + path)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == 'Basic realm="hasten", charset="UTF-8"'
            error = refused.json()["error"]
            assert error["type"] == "authentication_error"
            assert set(error) == {"message", "type", "param", "code"}
            assert ADMIN_KEY not in refused.text
            for headers in (basic("wrong"), basic("", user=ADMIN_KEY), {"authorization": "x"}):
                assert httpx.get(gateway.url + path, headers=headers).status_code == 401
            bearer = {"authorization": f"Bearer {ADMIN_KEY}"}
            assert httpx.get(gateway.url + path, headers=bearer).status_code == 200
            assert httpx.get(gateway.url + path, headers=basic(ADMIN_KEY)).status_code == 200
            assert httpx.get(gateway.url + path, headers=basic(ADMIN_KEY, "")).status_code == 200


def test_tenant_keys_never_open_it(sim: ServerThread) -> None:
    keys = [("team-a", "key-a-123")]
    with_admin = make_config({"sim": sim.url + "/v1"}, api_keys=keys, admin_api_key=ADMIN_KEY)
    with running_gateway(with_admin) as gateway:
        for headers in ({"authorization": "Bearer key-a-123"}, basic("key-a-123")):
            assert httpx.get(gateway.url + "/dashboard", headers=headers).status_code == 401
        ok = httpx.get(gateway.url + "/dashboard", headers=basic(ADMIN_KEY))
        assert ok.status_code == 200
    without_admin = make_config({"sim": sim.url + "/v1"}, api_keys=keys)
    with running_gateway(without_admin) as gateway:
        for headers in ({}, {"authorization": "Bearer key-a-123"}):
            refused = httpx.get(gateway.url + "/dashboard/data", headers=headers)
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "admin_api_disabled"


def test_without_metrics_nothing_is_observed(sim: ServerThread) -> None:
    config = replace(make_config({"sim": sim.url + "/v1"}), metrics=MetricsConfig(is_enabled=False))
    with running_gateway(config) as gateway:
        reply = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body("x"), timeout=10)
        assert reply.status_code == 200
        body = httpx.get(gateway.url + "/dashboard/data").json()
        assert body["is_observing"] is False
        assert body["window"]["requests"] == 0 and body["totals"]["requests"] == 0
        assert [d["wins"] for d in body["deployments"]] == [1]  # live state is still there


def test_only_get_and_head(sim: ServerThread) -> None:
    with running_gateway(make_config({"sim": sim.url + "/v1"})) as gateway:
        refused = httpx.post(gateway.url + "/dashboard/data")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        assert httpx.get(gateway.url + "/dashboard/").status_code == 404

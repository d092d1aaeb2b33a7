"""Schemathesis against ``/admin/keys`` with virtual keys on and the admin key: no generated
request gets a 5xx or an error outside the OpenAI shape, and no response to anything but a
create or a rotation carries a secret. Bounded: a few dozen cases per operation."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from hasten.config.keys_table import KeysConfig
from hasten.openapi import build_document
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread

schema = schemathesis.openapi.from_dict(build_document()).include(path_regex="^/admin/keys")
ADMIN_KEY = "fuzz-admin-key-for-virtual-keys"
SESSION = requests.Session()
STATUSES: list[int] = []


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with ServerThread(build_sim(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as upstream:
        config = make_config({"sim": upstream.url + "/v1"}, admin_api_key=ADMIN_KEY)
        config = replace(config, keys=KeysConfig(is_enabled=True, max_keys=50))
        with running_gateway(config) as gateway:
            yield gateway.url


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_breaks_the_key_api(case: Any, gateway_url: str) -> None:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    response = case.call(base_url=gateway_url, timeout=30, session=SESSION, headers=headers)
    STATUSES.append(response.status_code)
    assert response.status_code < 500, (response.status_code, response.content[:500])
    body = orjson.loads(response.content) if response.content else {}
    if response.status_code >= 400:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    is_secret_shown = case.method == "POST" and response.status_code in (200, 201)
    if not is_secret_shown:
        assert b"hsk_" not in response.content.replace(b"hsk_...", b""), response.content[:300]


def test_the_fuzzer_created_keys_and_was_refused_too() -> None:
    assert STATUSES.count(201) >= 5, STATUSES[:40]
    assert sum(400 <= status < 500 for status in STATUSES) >= 20

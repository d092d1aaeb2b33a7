"""Schemathesis against a live gateway (simulator upstream) from the gateway's own OpenAPI
document: no generated request, valid or not, gets a 5xx, and every error is OpenAI-shaped.

Bounded (a few hundred cases per operation, well under two minutes);
``bench/reliability/fuzz.py`` runs the long version and counts distinct bodies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings

from hasten.openapi import build_document
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from tests.support.gateway import make_config, running_gateway
from tests.support.servers import ServerThread
from tests.support.strategies import raw_requests

schema = schemathesis.openapi.from_dict(build_document())
MAX_EXAMPLES = 60
SESSION = requests.Session()  # keep-alive: the gateway, not connection set-up, is tested
CASES: list[Any] = []
# The admin endpoints get the admin key, so their bodies reach the validators (without it
# every admin case would only exercise the 403).
ADMIN_KEY = "fuzz-admin-key"
ADMIN_PATHS = ("/admin", "/stats")
ADMIN_STATUSES: list[int] = []


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    sim = SimConfig(ttft_base_ms=0, decode_ms_per_token=0, output_tokens=4)
    with ServerThread(build_sim(sim)) as upstream:
        config = make_config({"sim": upstream.url + "/v1"}, admin_api_key=ADMIN_KEY)
        with running_gateway(config) as gateway:
            yield gateway.url


def check_response(response: httpx.Response | Any, path: str = "") -> None:
    """The properties every answer must have, whatever the request: never a 5xx, and an
    error in its API's shape (Anthropic's under /v1/messages, OpenAI's elsewhere)."""
    assert response.status_code < 500, (response.status_code, response.content[:500])
    if response.status_code >= 400:
        body = orjson.loads(response.content)
        error = body["error"]
        if path.startswith(("/v1/messages", "/messages")):
            assert body["type"] == "error" and set(error) >= {"type", "message"}, body
        else:
            assert set(error) >= {"message", "type", "param", "code"}, body
        assert isinstance(error["message"], str) and error["message"]


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_breaks_the_gateway(case: Any, gateway_url: str) -> None:
    is_admin = case.path.startswith(ADMIN_PATHS)
    headers = {"authorization": f"Bearer {ADMIN_KEY}"} if is_admin else None
    response = case.call(base_url=gateway_url, timeout=30, session=SESSION, headers=headers)
    check_response(response, case.path)
    CASES.append(case.body if case.body is not None else case.path)
    if is_admin:
        ADMIN_STATUSES.append(response.status_code)


def test_the_fuzzer_ran_many_cases() -> None:
    # A fuzz run that generated nothing would pass vacuously.
    assert len(CASES) >= 300, len(CASES)
    # Nor one whose admin cases all stopped at the key check.
    assert sum(status != 403 for status in ADMIN_STATUSES) >= 50, ADMIN_STATUSES[:20]


def _reference_duplicate(raw: bytes) -> bool:
    """Whether any object of ``raw`` holds a key twice (the standard library sees every pair)."""
    found = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            found.append(True)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return bool(found)


RAW_CASES: list[bytes] = []


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(request=raw_requests())
def test_duplicate_keys_and_integers_of_any_size_break_nothing(
    request: tuple[str, bytes], gateway_url: str
) -> None:
    """Bodies written as text (schemathesis writes dicts, which cannot hold a key twice):
    never a 5xx, always the OpenAI error shape, and a key written twice is a 400 that says
    so, exactly when one is."""
    path, raw = request
    headers = {"content-type": "application/json", "authorization": f"Bearer {ADMIN_KEY}"}
    if not path.startswith("/admin"):
        headers.pop("authorization")
    response = httpx.post(gateway_url + path, content=raw, headers=headers, timeout=30)
    check_response(response, path)
    is_duplicate = _reference_duplicate(raw)
    error = response.json()["error"] if response.status_code >= 400 else {}
    # Anthropic's shape names no code: its message says what the key's was.
    is_refused = error.get("code") == "duplicate_key" or (
        path.startswith("/v1/messages") and "appears more than once" in error.get("message", "")
    )
    assert is_refused is is_duplicate, (raw[:300], response.text[:300])
    RAW_CASES.append(raw)


def test_the_raw_fuzzer_ran_many_cases_with_duplicates_and_big_integers() -> None:
    assert len(RAW_CASES) >= 150, len(RAW_CASES)
    assert sum(_reference_duplicate(raw) for raw in RAW_CASES) >= 30
    assert sum(bool(re.search(rb"\d{20}", raw)) for raw in RAW_CASES) >= 30


def test_the_document_is_served(gateway_url: str) -> None:
    served = httpx.get(gateway_url + "/openapi.json").json()
    assert served == orjson.loads(orjson.dumps(build_document()))
    assert "/v1/chat/completions" in served["paths"]

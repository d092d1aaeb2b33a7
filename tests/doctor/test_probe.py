"""The doctor's probes against real loopback servers: the simulator with known latencies,
and small ASGI apps that refuse the key, are not an OpenAI API, or have no /models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hasten.doctor.analysis import diagnose
from hasten.doctor.probe import DoctorSettings, probe
from hasten.errors import DoctorError, NotFound, Unauthorized
from hasten.simulator import SimConfig, build_app
from hasten.wire.asgi import Receive, Scope, Send, send_error, send_response
from tests.support.servers import ServerThread, free_port

SECRET = "sk-doctor-test-secret-4711"
# Shorter than the command's defaults: these tests check the probes, test_cli the acceptance.
NUM_TRIES = 3
MAX_TOKENS = 12


def within(value: float | None, expected: float, share: float = 0.10) -> bool:
    return value is not None and abs(value - expected) <= share * expected


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[ServerThread]:
    config = SimConfig(rtt_ms=80, ttft_base_ms=300, decode_ms_per_token=20)
    with ServerThread(build_app(config)) as server:
        yield server


def settings(url: str, **changes: Any) -> DoctorSettings:
    base: dict[str, Any] = {"num_tries": NUM_TRIES, "max_tokens": MAX_TOKENS, "timeout_s": 60}
    return DoctorSettings(base_url=url, **{**base, **changes})


async def test_recovers_the_simulated_latencies(slow_sim: ServerThread) -> None:
    timings = await probe(settings(f"{slow_sim.url}/v1"))
    d = diagnose(timings)
    assert timings.model == "sim-model"  # the first of GET /models
    assert timings.dns_ms is None and timings.tls_ms == ()
    assert len(timings.connect_ms) == NUM_TRIES and len(timings.streams) == NUM_TRIES
    assert within(d.rtt_ms, 80.0), d.rtt_ms
    assert within(d.server_ttft_ms, 300.0), d.server_ttft_ms
    assert d.client_ttft is not None and within(d.client_ttft.median, 380.0)
    assert d.decode_ms_per_token is not None and within(d.decode_ms_per_token.median, 20.0)
    assert d.num_tokens == MAX_TOKENS
    assert d.streaming.is_streaming
    assert d.prompt_cache is not None and not d.prompt_cache.is_detected  # no prefill cost


async def test_a_host_name_is_resolved_and_timed(slow_sim: ServerThread) -> None:
    timings = await probe(settings(f"http://localhost:{slow_sim.port}/v1", num_tries=1))
    assert timings.dns_ms is not None and timings.dns_ms >= 0


async def test_sees_the_simulated_prompt_cache() -> None:
    # Prefill costs 1 ms a token unless the prefix cache has it: a repeat is much faster.
    config = SimConfig(ttft_base_ms=20, prefill_ms_per_token=1.0, decode_ms_per_token=1)
    with ServerThread(build_app(config)) as server:
        timings = await probe(settings(f"{server.url}/v1"))
    cache = diagnose(timings).prompt_cache
    assert cache is not None and cache.is_detected
    assert cache.cold_ttft_ms > 2 * cache.repeat_ttft_ms


def without_models(app: Any) -> Any:
    """The simulator behind a front that has no /models (as some servers have not)."""

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/models"):
            await send_error(send, NotFound("no such path"))
            return
        await app(scope, receive, send)

    return front


async def test_without_models_the_rtt_comes_from_a_rejected_request() -> None:
    config = SimConfig(rtt_ms=50, ttft_base_ms=100, decode_ms_per_token=5)
    with ServerThread(without_models(build_app(config))) as server:
        url = f"{server.url}/v1"
        with pytest.raises(DoctorError, match="pass --model"):
            await probe(settings(url))
        timings = await probe(settings(url, model="sim-model"))
    assert "rejected POST" in timings.round_trip_method
    d = diagnose(timings)
    assert within(d.rtt_ms, 50.0), d.rtt_ms  # the simulator delays its 400s by the RTT too
    assert within(d.server_ttft_ms, 100.0), d.server_ttft_ms


async def refuse_key(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers everything with a 401 whose message echoes the key, as some providers do."""
    if scope["type"] != "http":
        return
    auth = dict(scope["headers"]).get(b"authorization", b"").decode()
    await send_error(send, Unauthorized(f"Incorrect API key provided: {auth}"))


async def test_a_refused_key_is_explained_without_showing_it() -> None:
    with ServerThread(refuse_key, lifespan="off") as server:
        with pytest.raises(DoctorError) as refused:
            await probe(settings(server.url, api_key=SECRET, key_env="MY_KEY"))
        with pytest.raises(DoctorError) as missing:
            await probe(settings(server.url))
    assert "401" in str(refused.value) and "$MY_KEY" in str(refused.value)
    assert SECRET not in str(refused.value)
    assert "No key was sent" in str(missing.value)


async def html_site(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "http":
        await send_response(send, 200, b"<html>hello</html>", [(b"content-type", b"text/html")])


async def test_a_site_that_is_not_an_openai_api() -> None:
    with ServerThread(html_site, lifespan="off") as server:
        with pytest.raises(DoctorError, match="not an OpenAI-compatible API"):
            await probe(settings(f"{server.url}/v1"))


async def test_nothing_listening_is_a_clear_error() -> None:
    with pytest.raises(DoctorError, match=r"cannot connect to 127\.0\.0\.1"):
        await probe(settings(f"http://127.0.0.1:{free_port()}/v1"))


@pytest.mark.parametrize(
    "changes", [{"num_tries": 0}, {"num_tries": 51}, {"max_tokens": 1}, {"timeout_s": 0}]
)
def test_unbounded_or_useless_settings_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DoctorSettings(base_url="http://127.0.0.1:1/v1", **changes)


def test_the_key_is_not_in_the_settings_repr() -> None:
    assert SECRET not in repr(DoctorSettings(base_url="http://x/v1", api_key=SECRET))

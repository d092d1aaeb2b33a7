"""A hostile upstream against ``hasten serve`` as a process (issue 41, defects 1, 3 and 10):
an endless body or stream costs the gateway at most its ``max_answer_bytes`` plus a
constant, read from /proc as the process's peak RSS; the client gets a 502 or a final SSE
error event; nothing is stored; the deployment is counted as failing. A stream that lies
about its content type is checked as the stream its client asked for, and only a stream
that ended properly is stored, without what followed its ``[DONE]``.

Memory is asserted, never time: the upstream sends at a bounded rate, so a gateway without
the cap holds hundreds of MB before its (short) total timeout, while one with it stops at
the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.hostile import HostileUpstream
from tests.support.servers import GatewayProcess, ServerThread

MIB = 1024 * 1024
CAP_BYTES = 8 * MIB
# What one request may cost beyond the bytes it holds: buffers on the way (the transport
# pauses reading past 1 MiB), the allocator's slack, a JSON error rendered.
CONSTANT_BYTES = 24 * MIB
ADMIN_KEY = "hostile-admin-key"


def _config(tmp_path: Path, upstream_url: str) -> Path:
    path = tmp_path / "hostile.toml"
    path.write_text(
        f"""
[server]
admin_api_key_env = "HOSTILE_TEST_ADMIN_KEY"

[upstreams.hostile]
url = "{upstream_url}/v1"
max_answer_bytes = {CAP_BYTES}
total_timeout_s = 8
idle_timeout_s = 8
max_retries = 0

[models."*"]
upstream = "hostile"

[cache]
backend = "memory"
"""
    )
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ServerThread, HostileUpstream]]:
    app = HostileUpstream()
    with ServerThread(app) as server:
        yield server, app


@pytest.fixture(scope="module")
def gateway(
    upstream: tuple[ServerThread, HostileUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = _config(tmp_path_factory.mktemp("hostile"), upstream[0].url)
    env = {"HOSTILE_TEST_ADMIN_KEY": ADMIN_KEY}
    with GatewayProcess("--config", str(config), env=env) as process:
        # Warm: the first request imports and builds what every later one reuses.
        httpx.post(f"{process.url}/v1/chat/completions", json=_chat("usage"), timeout=30)
        yield process


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


class Peak:
    """The gateway's RSS before, and its peak during, what runs inside."""

    def __init__(self, process: GatewayProcess) -> None:
        assert process.proc is not None
        self.pid = process.proc.pid
        self.before = self.peak = 0

    def __enter__(self) -> Peak:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # the peak starts again now
        self.before = _status(self.pid)["VmRSS"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = _status(self.pid)["VmHWM"]

    @property
    def growth(self) -> int:
        return self.peak - self.before


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hostile"}],
        "temperature": 0,
        **extra,
    }


def _post(gateway: GatewayProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1{path}", json=body, timeout=60)


def _stream_error(response: httpx.Response) -> dict[str, Any] | None:
    """The SSE error event a stream ended with, if it did."""
    events = [e for e in response.text.split("\n\n") if e.startswith("data: {")]
    last = orjson.loads(events[-1][6:]) if events else {}
    return last.get("error") if isinstance(last, dict) else None


def _failures(gateway: GatewayProcess) -> int:
    routing = httpx.get(
        f"{gateway.url}/admin/routing",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    ).json()
    return sum(
        deployment["failures"]
        for model in routing["models"].values()
        for deployment in model["deployments"].values()
    )


CASES = [
    # (scenario, path, extra body fields, what the client gets)
    ("endless-json", "/embeddings", {"input": "x"}, "502"),
    ("endless-json", "/chat/completions", {}, "502"),  # asked as a stream, lies as JSON
    ("endless-stream", "/chat/completions", {"stream": True}, "sse-error"),  # recorded
    ("endless-stream", "/chat/completions", {"stream": True, "temperature": 0.7}, "sse-error"),
    ("endless-stream", "/chat/completions", {}, "502"),  # assembled for a non-stream client
    ("endless-tiny-events", "/chat/completions", {"stream": True}, "sse-error"),
    ("endless-tiny-events", "/chat/completions", {}, "502"),
    ("endless-event", "/chat/completions", {"stream": True}, "sse-error"),
    ("endless-error-500", "/chat/completions", {}, "500"),
    ("endless-error-400", "/chat/completions", {"stream": True}, "502"),
]


@pytest.mark.parametrize(("scenario", "path", "extra", "expected"), CASES)
def test_an_endless_answer_costs_at_most_the_cap(
    gateway: GatewayProcess,
    upstream: tuple[ServerThread, HostileUpstream],
    scenario: str,
    path: str,
    extra: dict[str, Any],
    expected: str,
) -> None:
    body = {**_chat(scenario), **extra}
    if path == "/embeddings":
        body = {"model": scenario, **extra}
    failures_before = _failures(gateway)
    with Peak(gateway) as peak:
        response = _post(gateway, path, body)
    if expected == "sse-error":
        assert response.status_code == 200
        error = _stream_error(response)
        assert error is not None, response.text[-300:]
        assert error["code"] in ("upstream_too_large", "upstream_malformed"), error
    else:
        assert response.status_code == int(expected), response.text[:300]
        assert set(response.json()["error"]) >= {"message", "type", "code"}
    assert peak.growth <= CAP_BYTES + CONSTANT_BYTES, (
        f"{scenario}: RSS grew {peak.growth / MIB:.1f} MiB (before {peak.before / MIB:.0f} MiB)"
    )
    # Nothing of it was stored: asked again, the upstream is asked again.
    num_calls = upstream[1].calls[scenario]
    again = _post(gateway, path, body)
    assert again.headers.get("x-hasten-cache") != "hit"
    assert upstream[1].calls[scenario] == num_calls + 1
    # And the deployment was counted as failing (its breaker and ranking learn of it).
    assert _failures(gateway) > failures_before


@pytest.mark.parametrize(
    "scenario", ["lying-json-stream", "lying-no-type-stream", "lying-text-stream"]
)
def test_a_stream_lying_about_its_content_type_is_checked_and_never_stored(
    gateway: GatewayProcess, upstream: tuple[ServerThread, HostileUpstream], scenario: str
) -> None:
    body = _chat(scenario, stream=True)
    first = _post(gateway, "/chat/completions", body)
    assert first.headers["content-type"].startswith("text/event-stream")
    error = _stream_error(first)
    assert error is not None and error["code"] == "upstream_malformed", first.text
    assert b"\xff" not in first.content  # the invalid bytes never reached the client
    second = _post(gateway, "/chat/completions", body)
    assert second.headers["x-hasten-cache"] == "miss"
    assert upstream[1].calls[scenario] == 2
    # A non-stream client gets a 502, not a body assembled from what was never checked.
    assert _post(gateway, "/chat/completions", _chat(scenario)).status_code == 502


def test_a_whole_answer_that_is_no_json_is_refused_whatever_its_content_type(
    gateway: GatewayProcess, upstream: tuple[ServerThread, HostileUpstream]
) -> None:
    body = {"model": "lying-text-body", "input": "x"}
    response = _post(gateway, "/embeddings", body)
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_malformed"
    assert _post(gateway, "/embeddings", body).status_code == 502  # nothing was stored


def test_events_after_done_are_neither_forwarded_nor_stored(
    gateway: GatewayProcess, upstream: tuple[ServerThread, HostileUpstream]
) -> None:
    body = _chat("events-after-done", stream=True)
    first = _post(gateway, "/chat/completions", body)
    assert first.text.endswith("data: [DONE]\n\n"), first.text[-200:]
    assert "after the end" not in first.text and "not json" not in first.text
    hit = _post(gateway, "/chat/completions", body)
    assert hit.headers["x-hasten-cache"] == "hit"
    assert hit.text == first.text  # stored as forwarded: nothing after [DONE]
    assert upstream[1].calls["events-after-done"] == 1


def test_a_stream_without_a_finish_reason_is_not_stored(
    gateway: GatewayProcess, upstream: tuple[ServerThread, HostileUpstream]
) -> None:
    body = _chat("no-finish-reason", stream=True)
    first = _post(gateway, "/chat/completions", body)
    assert first.text.endswith("data: [DONE]\n\n")  # forwarded as it came
    assert _post(gateway, "/chat/completions", body).headers["x-hasten-cache"] == "miss"
    assert upstream[1].calls["no-finish-reason"] == 2
    # Its non-stream client is not handed a cut answer as a whole one.
    assert _post(gateway, "/chat/completions", _chat("no-finish-reason")).status_code == 502

"""Logs under hostile input (issue 10 item 8): a client can never forge a log line."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hasten.server.logs import JsonFormatter, TextFormatter
from hasten.simulator import SimConfig, build_app
from tests.support.servers import GatewayProcess, ServerThread

FORGED = "2026-01-01 00:00:00,000 INFO hasten: admin key rotated"
EVIL_MODEL = f"nope\n{FORGED}\r\x1b[2K"


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig())) as server:
        yield server


def _serve(sim: ServerThread, tmp_path: Path, *flags: str) -> GatewayProcess:
    config = tmp_path / "hasten.toml"
    # No "*" route: an unknown model is refused, and its name is logged with the 404.
    config.write_text(
        f'[upstreams.sim]\nurl = "{sim.url}/v1"\n[models."sim-model"]\nupstream = "sim"\n'
        "[cache]\nenabled = false\n",
        encoding="utf-8",
    )
    return GatewayProcess("--config", str(config), *flags)


def _logged_after(gateway: GatewayProcess, marker: str) -> list[str]:
    deadline = time.monotonic() + 10
    while marker not in gateway.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    return gateway.stderr.splitlines()


def _ask_for_evil_model(gateway: GatewayProcess) -> None:
    body = {"model": EVIL_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body)
    assert response.status_code == 404


def test_a_model_name_cannot_forge_a_line_in_the_text_log(
    sim: ServerThread, tmp_path: Path
) -> None:
    with _serve(sim, tmp_path) as gateway:
        _ask_for_evil_model(gateway)
        lines = _logged_after(gateway, "admin key rotated")
    assert not [line for line in lines if line.startswith(FORGED)]
    assert not any("\r" in line or "\x1b" in line for line in lines)
    (logged,) = [line for line in lines if "admin key rotated" in line]
    assert "nope\\n2026-01-01" in logged and "404" in logged


def test_json_logs_are_one_object_per_line(sim: ServerThread, tmp_path: Path) -> None:
    secret = "sk-never-logged-123"
    with _serve(sim, tmp_path, "--log-format", "json") as gateway:
        _ask_for_evil_model(gateway)
        served = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {secret}"},
        )
        assert served.status_code == 200
        request_id = served.headers["x-hasten-request-id"]
        lines = _logged_after(gateway, f'"request_id":"{request_id}"')
    records = [json.loads(line) for line in lines if line.startswith("{")]
    (refused,) = [r for r in records if "admin key rotated" in r["message"] and "status" in r]
    assert EVIL_MODEL in refused["message"]  # exact text, escaped by JSON itself
    assert refused["status"] == 404 and refused["request_id"]
    assert {"ts", "level", "logger"} <= set(refused)
    # The refused request's access record names the model it asked for, too.
    refusals = [r for r in records if r["logger"] == "hasten.access" and r["status"] == 404]
    assert [r["model"] for r in refusals] == [EVIL_MODEL]
    (access,) = [r for r in records if r.get("request_id") == request_id]
    assert access["logger"] == "hasten.access" and access["status"] == 200
    assert (access["model"], access["cache"], access["upstream"]) == ("sim-model", "bypass", "sim")
    assert access["tenant"].startswith("key-") and access["duration_ms"] > 0
    assert "upstream;dur=" in access["timing"]
    assert not [line for line in lines if line.startswith(FORGED)]
    assert secret not in "\n".join(lines)


def _record(message: str, *, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("hasten", logging.WARNING, __file__, 1, message, (), exc_info)


def test_tracebacks_stay_under_their_record() -> None:
    try:
        raise ValueError(f"bad model {EVIL_MODEL}")
    except ValueError as exc:
        record = _record("request failed", exc=exc)
    lines = TextFormatter().format(record).splitlines()
    assert "request failed" in lines[0]
    assert all(line.startswith("    ") for line in lines[1:])  # none passes for a record
    assert not any("\r" in line or "\x1b" in line for line in lines)
    assert EVIL_MODEL in json.loads(JsonFormatter().format(record))["exception"]


def test_undecodable_text_still_makes_a_json_line() -> None:
    line = JsonFormatter().format(_record("header caf\udce9"))
    assert json.loads(line)["message"] == "header caf\\udce9"

"""hasten bench against a tiny fake OpenAI-compatible server on loopback.

Asserts counts and structure only: timings on a shared 2-core machine are not testable.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from hasten.loadgen import LoadSettings, WorkloadSpec, run_load
from hasten.loadgen.cli import add_arguments, run
from hasten.loadgen.progress import ProgressSnapshot
from tests.support.servers import ServerThread

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

NUM_CONTENT_CHUNKS = 5
USAGE_TOKENS = 7


class FakeOpenAI:
    """Chat and completions, stream or not; ``x-hasten-cache`` says hit for a repeated body.

    Model ``fail`` answers 500; model ``nocache`` omits the cache header; model ``nousage``
    streams without a usage chunk; model ``broken`` streams an error event.
    """

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.requests: list[tuple[str, dict[bytes, bytes], dict[str, Any]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = orjson.loads(raw)
        self.requests.append((scope["path"], dict(scope["headers"]), request))
        model = request["model"]
        if model == "fail":
            await self._respond(send, 500, [], b'{"error": {"message": "boom"}}')
            return
        headers = [] if model == "nocache" else [(b"x-hasten-cache", self._cache_status(raw))]
        chat = scope["path"].endswith("/chat/completions")
        if request.get("stream"):
            await self._stream(send, headers, chat=chat, model=model)
        else:
            body = orjson.dumps(_completion(chat))
            await self._respond(send, 200, headers, body)

    def _cache_status(self, raw: bytes) -> bytes:
        status = b"hit" if raw in self.seen else b"miss"
        self.seen.add(raw)
        return status

    async def _respond(
        self, send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        headers = [*headers, (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _stream(
        self, send: Send, headers: list[tuple[bytes, bytes]], *, chat: bool, model: str
    ) -> None:
        headers = [*headers, (b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        events: list[dict[str, Any]] = []
        if chat:
            events.append({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        if model == "broken":
            events.append({"error": {"message": "upstream went away"}})
        for number in range(NUM_CONTENT_CHUNKS):
            piece = f"tok{number} "
            delta = {"delta": {"content": piece}} if chat else {"text": piece}
            events.append({"choices": [{"index": 0, **delta}]})
        if model != "nousage":
            events.append({"choices": [], "usage": {"completion_tokens": USAGE_TOKENS}})
        for event in events:
            data = b"data: " + orjson.dumps(event) + b"\n\n"
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _completion(chat: bool) -> dict[str, Any]:
    choice: dict[str, Any] = (
        {"index": 0, "message": {"role": "assistant", "content": "hello"}}
        if chat
        else {"index": 0, "text": "hello"}
    )
    return {"choices": [choice], "usage": {"completion_tokens": USAGE_TOKENS}}


@pytest.fixture
def fake() -> Iterator[tuple[FakeOpenAI, str]]:
    app = FakeOpenAI()
    with ServerThread(app, lifespan="off") as server:
        yield app, f"{server.url}/v1"


async def test_non_stream_chat_counts_hits(fake: tuple[FakeOpenAI, str]) -> None:
    app, base_url = fake
    settings = LoadSettings(
        base_url=base_url,
        workload=WorkloadSpec(num_unique=5),
        num_requests=20,
        api_key="sk-test",
    )
    report = await run_load(settings)
    assert (report.num_requests, report.num_ok, report.num_errors) == (20, 20, 0)
    assert report.cache == {"hit": 15, "miss": 5}
    assert report.hit_ratio == pytest.approx(0.75)
    assert report.latency_ms is not None and report.latency_ms.count == 20
    assert report.ttft_ms is not None and report.ttft_ms.count == 20
    assert report.inter_token_ms is None
    assert report.num_output_tokens == 20 * USAGE_TOKENS
    assert report.mode == "closed" and report.concurrency == 1
    assert len(app.requests) == 20
    path, headers, body = app.requests[0]
    assert path == "/v1/chat/completions"
    assert headers[b"authorization"] == b"Bearer sk-test"
    assert body["temperature"] == 0.0 and body["stream"] is False


async def test_stream_chat_measures_chunks(fake: tuple[FakeOpenAI, str]) -> None:
    app, base_url = fake
    settings = LoadSettings(
        base_url=base_url, stream=True, concurrency=4, num_requests=12, keep_samples=True
    )
    report = await run_load(settings)
    assert (report.num_ok, report.num_errors) == (12, 0)
    assert report.ttft_ms is not None and report.ttft_ms.count == 12
    assert report.inter_token_ms is not None
    assert report.inter_token_ms.count == 12 * (NUM_CONTENT_CHUNKS - 1)
    assert report.num_output_tokens == 12 * USAGE_TOKENS
    assert report.cache == {"miss": 12}  # synthetic prompts are all distinct by default
    assert report.samples is not None and len(report.samples.latency_ms) == 12
    assert all(body["stream_options"] == {"include_usage": True} for _, _, body in app.requests)


async def test_stream_completions_without_usage_counts_chunks(
    fake: tuple[FakeOpenAI, str],
) -> None:
    app, base_url = fake
    settings = LoadSettings(
        base_url=base_url, endpoint="completions", model="nousage", stream=True, num_requests=3
    )
    report = await run_load(settings)
    assert report.num_ok == 3
    assert report.num_output_tokens == 3 * NUM_CONTENT_CHUNKS
    assert report.cache == {"miss": 3}
    assert {path for path, _, _ in app.requests} == {"/v1/completions"}
    assert "prompt" in app.requests[0][2]


async def test_warmup_is_sent_but_not_reported(fake: tuple[FakeOpenAI, str]) -> None:
    app, base_url = fake
    settings = LoadSettings(base_url=base_url, num_warmup=3, num_requests=5, concurrency=2)
    report = await run_load(settings)
    assert len(app.requests) == 8
    assert report.num_requests == 5 and report.num_warmup == 3


async def test_errors_are_grouped_by_kind(fake: tuple[FakeOpenAI, str]) -> None:
    _, base_url = fake
    failing = await run_load(LoadSettings(base_url=base_url, model="fail", num_requests=4))
    assert failing.errors == {"500": 4}
    assert failing.num_ok == 0 and failing.hit_ratio is None and failing.latency_ms is None
    broken = await run_load(
        LoadSettings(base_url=base_url, model="broken", stream=True, num_requests=2)
    )
    assert broken.errors == {"stream_error": 2}
    absent = await run_load(LoadSettings(base_url=base_url, model="nocache", num_requests=2))
    assert absent.cache == {"absent": 2}


async def test_connection_refused_is_an_error_not_a_crash() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = await run_load(LoadSettings(base_url=f"http://127.0.0.1:{port}/v1", num_requests=3))
    assert report.num_ok == 0 and report.num_errors == 3
    assert sum(report.errors.values()) == 3


async def test_open_loop_sends_the_planned_count(fake: tuple[FakeOpenAI, str]) -> None:
    app, base_url = fake
    settings = LoadSettings(base_url=base_url, rate_rps=500.0, arrival="fixed", num_requests=10)
    report = await run_load(settings)
    assert report.num_ok == 10 and report.mode == "open"
    assert len(app.requests) == 10


async def test_duration_bounds_both_loops(fake: tuple[FakeOpenAI, str]) -> None:
    _, base_url = fake
    # Fixed arrivals every 50 ms inside 0.3 s: at most six start times exist.
    open_loop = await run_load(
        LoadSettings(
            base_url=base_url, rate_rps=20.0, arrival="fixed", num_requests=None, duration_s=0.3
        )
    )
    assert 1 <= open_loop.num_requests <= 6
    closed_loop = await run_load(
        LoadSettings(base_url=base_url, concurrency=2, num_requests=None, duration_s=0.2)
    )
    assert closed_loop.num_requests >= 1 and closed_loop.num_errors == 0


async def test_progress_sink_sees_the_final_count(fake: tuple[FakeOpenAI, str]) -> None:
    _, base_url = fake
    snapshots: list[tuple[ProgressSnapshot, bool]] = []
    num_closes = 0

    class Sink:
        def update(self, snapshot: ProgressSnapshot, *, final: bool = False) -> None:
            snapshots.append((snapshot, final))

        def close(self) -> None:
            nonlocal num_closes
            num_closes += 1

    await run_load(LoadSettings(base_url=base_url, num_requests=6, num_warmup=2), progress=Sink())
    finals = [snapshot for snapshot, final in snapshots if final]
    assert [(s.phase, s.num_done) for s in finals] == [("warmup", 2), ("run", 6)]
    assert num_closes == 2


def _cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_prints_json(fake: tuple[FakeOpenAI, str], capsys: pytest.CaptureFixture[str]) -> None:
    app, base_url = fake
    args = _cli_args(
        "--base-url",
        base_url,
        "--num-requests",
        "6",
        "--num-unique",
        "2",
        "--stream",
        "--header",
        "Cache-Control: no-cache",
        "--json",
        "--no-progress",
    )
    assert run(args) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["num_ok"] == 6
    assert report["cache"] == {"hit": 4, "miss": 2}
    assert set(report["latency_ms"]) >= {"p50", "p95", "p99", "p99_9", "max", "count"}
    assert app.requests[0][1][b"cache-control"] == b"no-cache"


def test_cli_human_summary_and_prompts_file(
    fake: tuple[FakeOpenAI, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    app, base_url = fake
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "one"}\n{"prompt": "two"}\n', encoding="utf-8")
    args = _cli_args("--base-url", base_url, "--prompts", str(prompts), "--num-requests", "4")
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "hit ratio 50.0%" in out and "latency" in out
    contents = [body["messages"][0]["content"] for _, _, body in app.requests]
    assert contents == ["one", "two", "one", "two"]


def test_cli_reports_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_cli_args("--repeat-ratio", "2")) == 2
    assert "repeat_ratio" in capsys.readouterr().err


def test_cli_exit_code_when_nothing_succeeds(
    fake: tuple[FakeOpenAI, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, base_url = fake
    args = _cli_args("--base-url", base_url, "--model", "fail", "--num-requests", "2")
    assert run(args) == 1
    assert "500: 2" in capsys.readouterr().out

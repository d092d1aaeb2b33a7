"""Chaos, short: the cache's backing store fails under load and no request notices.

Each test runs a real gateway (in-process uvicorn, hasten's own connection protocol) in
front of the simulator, drives a few threads of deterministic requests (half of them
streams) through it, breaks the L2 store mid-run and checks that every request still got a
200 with the answer the simulator gives for it, and that the cache recovers afterwards.
The stores' own failure modes are unit-tested in test_cache_redis.py and
test_cache_sqlite.py; the engine child killed under load is in test_local_supervisor.py.
bench/reliability/chaos.py is the long version, with upstream faults too.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from hasten.cache.entry import CachedAnswer
from hasten.cache.sqlite_store import SQLiteStore
from hasten.config import CacheConfig
from hasten.simulator import SimConfig
from hasten.simulator import build_app as build_sim
from hasten.simulator.generation import generate_choices
from hasten.simulator.inputs import parse_chat_request
from tests.support.faults import read_only, write_garbage
from tests.support.gateway import chat_body, make_config, running_gateway
from tests.support.servers import ServerThread, free_port, redis_server

# A little latency so requests overlap the fault instead of finishing between checks.
SIM = SimConfig(ttft_base_ms=2.0, decode_ms_per_token=0.5)
# Small enough that most lookups go past L1 to the store under test.
L1_MAX_BYTES = 8 * 1024
QUESTIONS = tuple(f"chaos question number {i}" for i in range(24))
NUM_THREADS = 3
# Bounds every loop: a stuck gateway fails the test instead of hanging it.
MAX_REQUESTS = 5000
MAX_WAIT_S = 30.0


def expected_text(body: dict[str, Any]) -> str:
    """What the simulator answers to ``body``: its text is a pure function of the request."""
    return generate_choices(parse_chat_request(body), SIM.output_tokens, None)[0].text


@dataclass
class Tally:
    """Shared by the load threads; read once they have stopped."""

    num_requests: int = 0
    failures: list[str] = field(default_factory=list)
    wrong_answers: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, failure: str | None, wrong: str | None) -> None:
        with self.lock:
            self.num_requests += 1
            if failure is not None:
                self.failures.append(failure)
            if wrong is not None:
                self.wrong_answers.append(wrong)


def ask(
    client: httpx.Client, url: str, question: str, *, stream: bool, no_cache: bool = False
) -> tuple[str | None, str]:
    """One request: (failure description or None, the answer's text)."""
    body = chat_body(question, stream=stream)
    # no-cache skips the lookup but stores the answer: writes go on while hits are served.
    headers = {"cache-control": "no-cache"} if no_cache else {}
    if not stream:
        response = client.post(url + "/v1/chat/completions", json=body, headers=headers)
        if response.status_code != 200:
            return f"{response.status_code} {response.text[:200]}", ""
        return None, str(response.json()["choices"][0]["message"]["content"])
    text, is_done = [], False
    with client.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=headers
    ) as response:
        if response.status_code != 200:
            return f"stream {response.status_code} {response.read()[:200]!r}", ""
        for line in response.iter_lines():
            if line == "data: [DONE]":
                is_done = True
            elif line.startswith("data: "):
                event = orjson.loads(line[6:])
                if "error" in event:
                    return f"stream error event {line[:200]}", ""
                for choice in event.get("choices", []):
                    text.append(choice.get("delta", {}).get("content") or "")
    return (None if is_done else "stream ended without [DONE]"), "".join(text)


@contextlib.contextmanager
def load(url: str) -> Iterator[Tally]:
    """Threads asking the questions round-robin until the block ends."""
    tally, stop = Tally(), threading.Event()

    def worker(offset: int) -> None:
        with httpx.Client(timeout=20.0) as client:
            for index in range(offset, MAX_REQUESTS, NUM_THREADS):
                if stop.is_set():
                    return
                question = QUESTIONS[index % len(QUESTIONS)]
                try:
                    failure, text = ask(
                        client, url, question, stream=index % 2 == 0, no_cache=index % 5 == 0
                    )
                except httpx.HTTPError as exc:
                    failure, text = f"{type(exc).__name__}: {exc}", ""
                expected = expected_text(chat_body(question))
                wrong = None
                if failure is None and text != expected:
                    wrong = f"{question!r}: got {text!r}, want {expected!r}"
                tally.record(failure, wrong)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(NUM_THREADS)]
    for thread in threads:
        thread.start()
    try:
        yield tally
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=MAX_WAIT_S)
        assert not any(thread.is_alive() for thread in threads), "a load thread hung"


def cache_stats(url: str) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(url + "/stats", timeout=10).json()["cache"]
    return stats


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + MAX_WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def requests_so_far(tally: Tally) -> int:
    with tally.lock:
        return tally.num_requests


def run_for(tally: Tally, num_more: int) -> None:
    """Waits until the load has made ``num_more`` more requests (a count, not a duration)."""
    target = requests_so_far(tally) + num_more
    wait_until(lambda: requests_so_far(tally) >= target, f"{target} requests were made")


def assert_clean(tally: Tally) -> None:
    assert tally.num_requests > 0
    assert tally.failures == [], tally.failures[:5]
    assert tally.wrong_answers == [], tally.wrong_answers[:5]


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_sim(SIM)) as server:
        yield server


def sqlite_config(sim: ServerThread, path: Path) -> Any:
    cache = CacheConfig(backend="sqlite", sqlite_path=str(path), l1_max_bytes=L1_MAX_BYTES)
    return make_config({"sim": sim.url + "/v1"}, cache=cache)


# --- Redis -------------------------------------------------------------------------------


def test_redis_stopped_and_restarted_under_load_fails_no_request(
    sim: ServerThread, tmp_path: Path
) -> None:
    port, workdir = free_port(), str(tmp_path)
    redis_url = f"redis://127.0.0.1:{port}/0"
    cache = CacheConfig(backend="redis", redis_url=redis_url, l1_max_bytes=L1_MAX_BYTES)
    with running_gateway(make_config({"sim": sim.url + "/v1"}, cache=cache)) as gateway:
        with redis_server(port, workdir), load(gateway.url) as tally:
            run_for(tally, 3 * len(QUESTIONS))
            assert cache_stats(gateway.url)["l2_hits"] > 0  # the store under test serves
        # redis-server has stopped; the load goes on without it.
        with load(gateway.url) as outage:
            wait_until(lambda: cache_stats(gateway.url)["l2_failures"] > 0, "Redis is missed")
            run_for(outage, 2 * len(QUESTIONS))
        with redis_server(port, workdir), load(gateway.url) as after:
            hits_at_restart = cache_stats(gateway.url)["l2_hits"]
            # Answers written before the outage come back from Redis's append-only file.
            wait_until(
                lambda: cache_stats(gateway.url)["l2_hits"] > hits_at_restart,
                "Redis serves hits again",
            )
            run_for(after, len(QUESTIONS))
            assert cache_stats(gateway.url)["l2_healthy"] is True
    for phase in (tally, outage, after):
        assert_clean(phase)


# --- SQLite read-only --------------------------------------------------------------------


def fill(url: str, questions: tuple[str, ...]) -> None:
    with httpx.Client(timeout=20.0) as client:
        for question in questions:
            failure, _ = ask(client, url, question, stream=False)
            assert failure is None, failure


def num_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM hasten_cache_v1").fetchone()[0])


def test_sqlite_read_only_under_load_fails_no_request_and_writes_resume_after(
    sim: ServerThread, tmp_path: Path
) -> None:
    path = tmp_path / "cache.sqlite3"
    with running_gateway(sqlite_config(sim, path)) as gateway:
        fill(gateway.url, QUESTIONS[::2])  # on disk: hits for the read-only phase to serve
    # Read-only from the gateway's start: as root or not, its connection cannot write.
    with contextlib.ExitStack() as fault:
        fault.enter_context(read_only(path))
        with running_gateway(sqlite_config(sim, path)) as gateway:
            with load(gateway.url) as unwritable:
                wait_until(lambda: cache_stats(gateway.url)["write_errors"] > 0, "writes fail")
                run_for(unwritable, len(QUESTIONS))
                assert num_rows(path) == len(QUESTIONS[::2])
            fault.close()  # writable again; the same gateway keeps running
            with load(gateway.url) as writable:
                # What could not be written reaches the file now, without a restart.
                wait_until(lambda: num_rows(path) == len(QUESTIONS), "every answer is on disk")
                wait_until(lambda: cache_stats(gateway.url)["l2_hits"] > 0, "L2 serves")
                run_for(writable, len(QUESTIONS))
                assert cache_stats(gateway.url)["l2_healthy"] is True
    for phase in (unwritable, writable):
        assert_clean(phase)


async def test_a_store_opened_read_only_writes_once_the_file_is_writable(
    tmp_path: Path,
) -> None:
    # The regression under the test above: SQLite opens an unwritable file read-only and
    # that connection stays so, so before the fix writes failed until the process restarted.
    path = tmp_path / "cache.sqlite3"
    entry = CachedAnswer.from_body(b'{"x": 1}', endpoint="chat", ttl_s=600)
    store = SQLiteStore(path, retry_backoff_s=0.0)
    assert await store.put("a", entry)
    await store.close()
    with read_only(path):
        store = SQLiteStore(path, retry_backoff_s=0.0)
        assert await store.get("a") == entry
        assert not await store.put("b", entry)
        assert not store.is_healthy
    try:
        assert await store.put("b", entry)
        assert store.is_healthy and await store.get("b") == entry
    finally:
        await store.close()


# --- SQLite corrupted --------------------------------------------------------------------


@pytest.mark.parametrize("include_header", [True, False], ids=["header", "pages"])
def test_sqlite_corrupted_mid_run_fails_no_request_and_serves_no_wrong_answer(
    sim: ServerThread, tmp_path: Path, include_header: bool
) -> None:
    path = tmp_path / "cache.sqlite3"

    def found() -> int:
        stats = cache_stats(gateway.url)
        return int(stats["l2_corruptions"]) + int(stats["l2_bad_entries"])

    with running_gateway(sqlite_config(sim, path)) as gateway, load(gateway.url) as tally:
        run_for(tally, 3 * len(QUESTIONS))
        assert cache_stats(gateway.url)["l2_hits"] > 0
        write_garbage(path, seed=10, include_header=include_header)
        wait_until(lambda: found() > 0, "the damage is found")
        if cache_stats(gateway.url)["l2_corruptions"] > 0:
            assert list(tmp_path.glob("cache.sqlite3.corrupt-*")), "kept for inspection"
        hits = cache_stats(gateway.url)["l2_hits"]
        # The (new or cleaned) file fills and serves again.
        wait_until(lambda: cache_stats(gateway.url)["l2_hits"] > hits, "the file serves")
        run_for(tally, len(QUESTIONS))
        assert cache_stats(gateway.url)["l2_healthy"] is True
    assert_clean(tally)


async def test_an_extended_corruption_code_moves_the_file_aside(tmp_path: Path) -> None:
    # SQLite reports a malformed index as SQLITE_CORRUPT_INDEX; before the fix only the
    # bare SQLITE_CORRUPT counted, so a damaged index left the tier failing every call
    # (serving misses) with the file never replaced and no corruption counted.
    path = tmp_path / "cache.sqlite3"
    entry = CachedAnswer.from_body(b'{"x": 1}', endpoint="chat", ttl_s=600)
    store = SQLiteStore(path, retry_backoff_s=0.0)
    try:
        assert await store.put("a", entry)
        error = sqlite3.DatabaseError("database disk image is malformed")
        error.sqlite_errorcode = 779
        error.sqlite_errorname = "SQLITE_CORRUPT_INDEX"

        def malformed(conn: sqlite3.Connection, key: str) -> CachedAnswer | None:
            raise error

        store._get_sync = malformed  # type: ignore[method-assign]
        assert await store.get("a") is None
        assert store.counters()["corruptions"] == 1
        assert len(store.moved_aside) == 1 and store.moved_aside[0].exists()
        assert await store.put("b", entry)  # a new file takes writes at once
        assert store.is_healthy
    finally:
        await store.close()


def test_expected_text_is_what_the_simulator_sends(sim: ServerThread) -> None:
    # The oracle the tests above compare with: if it drifted from the simulator they could
    # only fail, but this says why.
    body = chat_body(QUESTIONS[0])
    sent = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=10).json()
    assert sent["choices"][0]["message"]["content"] == expected_text(body)

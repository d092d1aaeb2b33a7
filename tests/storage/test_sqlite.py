"""hasten.storage.sqlite: a file opened one way, confined to its thread, failing soft when
asked to, closed once however often it is closed; a corrupt file is seen, not served."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from hasten.storage.sqlite import Failure, SQLiteThread, open_database, transaction
from tests.support.faults import write_garbage

_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
_LOGGER = logging.getLogger("tests.storage")


def _put(conn: sqlite3.Connection, item: tuple[str, str]) -> bool:
    conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", item)
    return True


def _get(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _count(conn: sqlite3.Connection, _: None) -> int:
    return int(conn.execute("SELECT count(*) FROM kv").fetchone()[0])


class Opener:
    """``open_database`` for a ``SQLiteThread``, noting on which thread each open ran."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.threads: list[str] = []

    def __call__(self) -> sqlite3.Connection:
        self.threads.append(threading.current_thread().name)
        return open_database(self.path, schema=_SCHEMA, busy_timeout_s=0.05)


class Failures:
    """An ``on_failure`` that answers ``failure`` and keeps what it was given."""

    def __init__(self, failure: Failure = Failure.TRANSIENT) -> None:
        self.failure = failure
        self.seen: list[BaseException] = []

    def __call__(self, exc: BaseException) -> Failure:
        self.seen.append(exc)
        return self.failure


@pytest.fixture
async def made(tmp_path: Path) -> AsyncIterator[Callable[..., SQLiteThread]]:
    threads: list[SQLiteThread] = []

    def make(
        path: Path | None = None,
        *,
        opener: Callable[[], sqlite3.Connection] | None = None,
        retry_backoff_s: float = 1.0,
        on_failure: Callable[[BaseException], Failure] | None = None,
    ) -> SQLiteThread:
        path = path or tmp_path / "kv.sqlite3"
        thread = SQLiteThread(
            path,
            opener or Opener(path),
            thread_name="hasten-test-sqlite",
            label="test file",
            logger=_LOGGER,
            retry_backoff_s=retry_backoff_s,
            on_failure=on_failure,
        )
        threads.append(thread)
        return thread

    yield make
    for thread in threads:
        await thread.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == _LOGGER.name and r.levelno == logging.WARNING
    ]


# --- open_database and transaction -----------------------------------------------------------


def test_a_file_is_opened_in_wal_mode_with_its_schema_and_folders(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "kv.sqlite3"
    prepared: list[sqlite3.Connection] = []
    conn = open_database(path, schema=_SCHEMA, synchronous="FULL", prepare=prepared.append)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert prepared == [conn]
        assert _put(conn, ("k", "v")) and not conn.in_transaction  # autocommit
    finally:
        conn.close()
    with sqlite3.connect(path) as other:
        assert _get(other, "k") == "v"


def test_a_failing_prepare_closes_the_connection(tmp_path: Path) -> None:
    opened: list[sqlite3.Connection] = []

    def prepare(conn: sqlite3.Connection) -> None:
        opened.append(conn)
        raise sqlite3.OperationalError("migration failed")

    with pytest.raises(sqlite3.OperationalError, match="migration failed"):
        open_database(tmp_path / "kv.sqlite3", schema=_SCHEMA, prepare=prepare)
    with pytest.raises(sqlite3.ProgrammingError):  # closed, not leaked
        opened[0].execute("SELECT 1")


def test_a_transaction_commits_whole_or_not_at_all(tmp_path: Path) -> None:
    conn = open_database(tmp_path / "kv.sqlite3", schema=_SCHEMA)
    try:
        with transaction(conn):
            _put(conn, ("a", "1"))
            _put(conn, ("b", "2"))
        with pytest.raises(ValueError), transaction(conn):
            _put(conn, ("c", "3"))
            raise ValueError("half way")
        assert not conn.in_transaction
        assert _count(conn, None) == 2 and _get(conn, "c") is None
    finally:
        conn.close()


def test_an_immediate_transaction_holds_the_write_lock_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    conn = open_database(path, schema=_SCHEMA)
    other = open_database(path, schema=_SCHEMA, busy_timeout_s=0.0)
    try:
        with transaction(conn, is_immediate=True):
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                _put(other, ("k", "other"))
            _put(conn, ("k", "mine"))
        with transaction(conn):  # deferred: no lock until it writes
            _put(other, ("k2", "other"))
        assert _get(conn, "k") == "mine" and _get(conn, "k2") == "other"
    finally:
        other.close()
        conn.close()


# --- SQLiteThread ------------------------------------------------------------------------


async def test_the_connection_lives_and_works_on_its_one_thread(
    made: Callable[..., SQLiteThread], tmp_path: Path
) -> None:
    opener = Opener(tmp_path / "kv.sqlite3")
    file = made(opener=opener)
    caller = threading.current_thread().name

    def where(conn: sqlite3.Connection, _: None) -> tuple[str, sqlite3.Connection]:
        return threading.current_thread().name, conn

    assert await file.run(_put, ("k", "v"))
    name, conn = await file.run(where, None)
    assert name.startswith("hasten-test-sqlite") and name != caller
    assert opener.threads == [name]  # opened once, there
    with pytest.raises(sqlite3.ProgrammingError, match="thread"):
        conn.execute("SELECT 1")  # SQLite's own check: the connection never leaves it
    assert await file.run_soft(_get, "k", None) == "v"


async def test_run_raises_what_the_file_raises(made: Callable[..., SQLiteThread]) -> None:
    file = made()

    def broken(conn: sqlite3.Connection, _: None) -> None:
        conn.execute("SELECT * FROM no_such_table")

    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        await file.run(broken, None)
    assert await file.run(_count, None) == 0  # the thread carries on
    assert file.is_healthy  # only run_soft keeps health


async def test_closing_twice_is_closing_once_and_later_calls_are_refused(
    made: Callable[..., SQLiteThread],
) -> None:
    file = made()
    assert await file.run(_put, ("k", "v"))
    await file.close()
    await file.close()
    assert not file.is_usable()
    with pytest.raises(RuntimeError, match="closed"):
        await file.run(_get, "k")
    assert await file.run_soft(_count, None, -1) == -1


async def test_a_file_closed_before_first_use_is_never_opened(
    made: Callable[..., SQLiteThread], tmp_path: Path
) -> None:
    opener = Opener(tmp_path / "kv.sqlite3")
    file = made(opener=opener)
    await file.close()
    assert opener.threads == []
    assert not (tmp_path / "kv.sqlite3").exists()


async def test_a_failure_is_the_default_with_one_warning_until_it_recovers(
    made: Callable[..., SQLiteThread], caplog: pytest.LogCaptureFixture
) -> None:
    file = made(retry_backoff_s=0.0)
    is_broken = True

    def flaky(conn: sqlite3.Connection, item: tuple[str, str]) -> bool:
        if is_broken:
            raise sqlite3.OperationalError("disk I/O error")
        return _put(conn, item)

    with caplog.at_level(logging.INFO, logger=_LOGGER.name):
        for _ in range(5):
            assert await file.run_soft(flaky, ("k", "v"), False) is False
        assert not file.is_healthy
        is_broken = False
        assert await file.run_soft(flaky, ("k", "v"), False) is True
    assert file.is_healthy
    (warning,) = _warnings(caplog)
    assert "test file at" in warning and "disk I/O error" in warning
    assert "retrying every 0 s" in warning
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert recovered == [f"test file at {file.path} recovered"]


async def test_after_a_transient_failure_the_file_is_left_alone_for_the_backoff(
    made: Callable[..., SQLiteThread],
) -> None:
    failures = Failures(Failure.TRANSIENT)
    file = made(retry_backoff_s=3600.0, on_failure=failures)
    calls: list[str] = []

    def failing(conn: sqlite3.Connection, key: str) -> str:
        calls.append(key)
        raise sqlite3.OperationalError("database is locked")

    assert await file.run_soft(failing, "first", "miss") == "miss"
    assert not file.is_usable()
    assert await file.run_soft(failing, "second", "miss") == "miss"
    assert calls == ["first"]  # the second never reached the file
    assert len(failures.seen) == 1


async def test_the_default_on_failure_opens_a_new_connection_next_time(
    made: Callable[..., SQLiteThread], tmp_path: Path
) -> None:
    opener = Opener(tmp_path / "kv.sqlite3")
    file = made(opener=opener, retry_backoff_s=0.0)

    def failing(conn: sqlite3.Connection, _: None) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    assert await file.run_soft(_count, None, -1) == 0
    await file.run_soft(failing, None, None)
    assert await file.run_soft(_count, None, -1) == 0
    assert len(opener.threads) == 2


async def test_a_permanent_failure_leaves_the_file_alone_until_restart(
    made: Callable[..., SQLiteThread], caplog: pytest.LogCaptureFixture
) -> None:
    failures = Failures(Failure.PERMANENT)
    file = made(retry_backoff_s=0.0, on_failure=failures)
    calls = 0

    def failing(conn: sqlite3.Connection, _: None) -> int:
        nonlocal calls
        calls += 1
        raise sqlite3.OperationalError("unable to open database file")

    with caplog.at_level(logging.WARNING, logger=_LOGGER.name):
        for _ in range(3):
            assert await file.run_soft(failing, None, -1) == -1
            assert await file.run_soft(_count, None, -1) == -1
    assert calls == 1 and not file.is_usable() and not file.is_healthy
    (warning,) = _warnings(caplog)
    assert warning.endswith("until restart")


async def test_a_replaced_file_is_tried_again_at_once_without_a_warning(
    made: Callable[..., SQLiteThread], caplog: pytest.LogCaptureFixture
) -> None:
    failures = Failures(Failure.REPLACED)
    file = made(retry_backoff_s=3600.0, on_failure=failures)
    is_broken = True

    def flaky(conn: sqlite3.Connection, _: None) -> int:
        if is_broken:
            raise sqlite3.DatabaseError("file is not a database")
        return _count(conn, None)

    with caplog.at_level(logging.WARNING, logger=_LOGGER.name):
        assert await file.run_soft(flaky, None, -1) == -1
        assert file.is_usable() and not file.is_healthy  # no backoff: a new file waits
        is_broken = False
        assert await file.run_soft(flaky, None, -1) == 0
    assert file.is_healthy
    assert _warnings(caplog) == []  # the store that replaced the file says so itself


async def test_a_corrupt_file_is_seen_at_open_and_never_served(
    made: Callable[..., SQLiteThread], tmp_path: Path
) -> None:
    path = tmp_path / "kv.sqlite3"
    first = made(path)
    for n in range(200):
        assert await first.run(_put, (f"k{n}", "v" * 100))
    await first.close()
    write_garbage(path, seed=40, include_header=True)

    # Raising (as the key store does): the caller refuses rather than guess.
    raising = made(path)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        await raising.run(_get, "k1")
    assert caught.value.sqlite_errorname == "SQLITE_NOTADB"
    await raising.close()

    # Failing soft (as the stores that serve misses do): found by the open at startup,
    # handed to on_failure once, and every call meanwhile is its default.
    failures = Failures(Failure.TRANSIENT)
    soft = made(path, retry_backoff_s=3600.0, on_failure=failures)
    soft.open_soon()
    assert await soft.run_soft(_count, None, -1) == -1
    (seen,) = failures.seen
    assert isinstance(seen, sqlite3.DatabaseError)
    assert getattr(seen, "sqlite_errorname", None) == "SQLITE_NOTADB"
    assert not soft.is_healthy


async def test_calls_queue_on_the_thread_in_order(made: Callable[..., SQLiteThread]) -> None:
    file = made()
    assert await file.run(_put, ("k", "0"))
    order: list[str] = []

    def append(conn: sqlite3.Connection, value: str) -> None:
        order.append(value)
        _put(conn, ("k", value))

    await asyncio.gather(*(file.run_soft(append, str(n), None) for n in range(20)))
    assert order == [str(n) for n in range(20)]
    assert await file.run(_get, "k") == "19"

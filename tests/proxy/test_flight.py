"""Unit tests for hasten.proxy.flight: shared upstream responses, late joiners, cancellation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from hasten.errors import HastenError, UpstreamError
from hasten.proxy.flight import Coalescer, Flight

pytestmark = pytest.mark.timeout(20)


async def _settle(rounds: int = 5) -> None:
    """Lets every ready task run a few steps (no wall-clock dependence)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Script:
    """A controllable upstream: the test decides when each event happens."""

    def __init__(self) -> None:
        self.steps: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self.calls = 0
        self.was_cancelled = False
        self.started = asyncio.Event()

    async def __call__(self, flight: Flight) -> None:
        self.calls += 1
        self.started.set()
        try:
            while True:
                kind, value = await self.steps.get()
                if kind == "start":
                    flight.start(200, {"content-type": "text/event-stream"}, "up", 12.5)
                elif kind == "push":
                    assert isinstance(value, bytes)
                    flight.push(value)
                elif kind == "finish":
                    flight.finish()
                    return
                elif kind == "fail":
                    assert isinstance(value, HastenError)
                    flight.finish(value)
                    return
                elif kind == "raise":
                    assert isinstance(value, BaseException)
                    raise value
                elif kind == "return":
                    return
        except asyncio.CancelledError:
            self.was_cancelled = True
            raise

    async def do(self, kind: str, value: object = None) -> None:
        await self.steps.put((kind, value))
        await _settle()


async def _collect(flight: Flight) -> list[bytes]:
    await flight.wait_started()
    return [chunk async for chunk in flight.iter_chunks()]


# --- Flight alone ---------------------------------------------------------------------------


async def test_flight_records_start_and_chunks() -> None:
    flight = Flight()
    assert not flight.is_started and not flight.is_done
    flight.start(201, {"x": "y"}, "up", 3.0)
    flight.push(b"a")
    flight.push(b"b")
    flight.finish()
    await flight.wait_started()
    assert (flight.status, dict(flight.headers), flight.upstream_name, flight.ttfb_ms) == (
        201,
        {"x": "y"},
        "up",
        3.0,
    )
    assert [c async for c in flight.iter_chunks()] == [b"a", b"b"]
    assert await flight.read_all() == b"ab"
    assert flight.error is None


async def test_wait_started_raises_error_when_finished_without_start() -> None:
    flight = Flight()
    error = UpstreamError("boom")
    flight.finish(error)
    with pytest.raises(UpstreamError) as info:
        await flight.wait_started()
    assert info.value is error


async def test_wait_started_raises_generic_error_when_finished_silently() -> None:
    flight = Flight()
    flight.finish()
    with pytest.raises(HastenError, match="without a response"):
        await flight.wait_started()


async def test_iterators_follow_live_pushes() -> None:
    flight = Flight()
    flight.start(200, {}, "up", 0.0)
    readers = [asyncio.create_task(_collect(flight)) for _ in range(3)]
    for i in range(20):
        flight.push(b"%d" % i)
        if i % 3 == 0:
            await _settle(1)
    flight.finish()
    expected = [b"%d" % i for i in range(20)]
    assert await asyncio.gather(*readers) == [expected] * 3


async def test_wait_change_wakes_a_reader_that_is_no_waiter() -> None:
    flight = Flight()
    woken = asyncio.create_task(flight.wait_change())
    await asyncio.sleep(0)
    assert not woken.done()
    flight.push(b"x")
    await asyncio.wait_for(woken, 5)
    assert flight.num_waiters == 0


async def test_pushes_in_one_tick_are_not_lost() -> None:
    flight = Flight()
    flight.start(200, {}, "up", 0.0)
    reader = asyncio.create_task(_collect(flight))
    await _settle()
    flight.push(b"a")
    flight.push(b"b")
    flight.push(b"c")
    flight.finish()
    assert await reader == [b"a", b"b", b"c"]


# --- Coalescer ------------------------------------------------------------------------------


async def test_join_shares_one_run() -> None:
    coalescer = Coalescer()
    script = Script()
    first, is_new = coalescer.join("k", script)
    second, is_new2 = coalescer.join("k", script)
    other, is_new3 = coalescer.join("other", Script())
    assert is_new and not is_new2 and is_new3
    assert first is second
    assert other is not first
    assert first.num_waiters == 2
    assert len(coalescer) == 2
    await _settle()
    assert script.calls == 1
    assert other.task is not None
    other.task.cancel()
    await script.do("start")
    await script.do("finish")
    await _settle()


async def test_late_joiner_gets_earlier_chunks_then_live_ones() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    early = asyncio.create_task(_collect(flight))
    await script.do("start")
    await script.do("push", b"1")
    await script.do("push", b"2")

    late_flight, is_new = coalescer.join("k", script)
    assert late_flight is flight and not is_new
    late = asyncio.create_task(_collect(late_flight))
    await _settle()
    await script.do("push", b"3")
    await script.do("push", b"4")
    await script.do("finish")
    assert await early == [b"1", b"2", b"3", b"4"]
    assert await late == [b"1", b"2", b"3", b"4"]
    assert script.calls == 1


async def test_joiner_after_last_chunk_before_finish() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("push", b"all")
    late, _ = coalescer.join("k", script)
    assert late is flight
    reader = asyncio.create_task(_collect(late))
    await _settle()
    assert not reader.done()
    await script.do("finish")
    assert await reader == [b"all"]


async def test_n_waiters_see_identical_sequences() -> None:
    coalescer = Coalescer()
    script = Script()
    readers: list[asyncio.Task[list[bytes]]] = []
    flight, _ = coalescer.join("k", script)
    readers.append(asyncio.create_task(_collect(flight)))
    await script.do("start")
    expected: list[bytes] = []
    for i in range(12):
        if i % 3 == 0:  # waiters join at different points of the stream
            joined, _ = coalescer.join("k", script)
            readers.append(asyncio.create_task(_collect(joined)))
        chunk = b"chunk-%d;" % i
        expected.append(chunk)
        await script.do("push", chunk)
    await script.do("finish")
    results = await asyncio.gather(*readers)
    assert len(results) == 5
    assert all(result == expected for result in results)
    assert await flight.read_all() == b"".join(expected)


async def test_leaving_one_waiter_does_not_cancel() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    coalescer.join("k", script)
    await script.do("start")
    await script.do("push", b"a")
    coalescer.leave(flight)
    await _settle()
    assert flight.num_waiters == 1
    assert flight.task is not None and not flight.task.done()
    assert not script.was_cancelled
    await script.do("push", b"b")
    await script.do("finish")
    assert await flight.read_all() == b"ab"
    assert flight.error is None
    coalescer.leave(flight)


async def test_last_waiter_leaving_cancels_run() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    coalescer.join("k", script)
    await script.do("start")
    coalescer.leave(flight)
    coalescer.leave(flight)
    assert flight.task is not None
    with pytest.raises(asyncio.CancelledError):
        await flight.task
    assert script.was_cancelled
    assert flight.is_done
    assert flight.error is not None
    assert flight.error.code == "cancelled"
    assert len(coalescer) == 0


async def test_rejoin_after_cancel_starts_a_fresh_flight() -> None:
    # The last waiter leaves and a new identical request arrives before the cancelled
    # task has run: the newcomer must not inherit the cancellation.
    coalescer = Coalescer()
    first_script = Script()
    flight, _ = coalescer.join("k", first_script)
    await first_script.do("start")
    coalescer.leave(flight)
    second_script = Script()
    fresh, is_new = coalescer.join("k", second_script)
    assert is_new
    assert fresh is not flight
    reader = asyncio.create_task(_collect(fresh))
    await second_script.do("start")
    await second_script.do("push", b"ok")
    await second_script.do("finish")
    assert await reader == [b"ok"]
    assert fresh.error is None
    assert first_script.was_cancelled
    assert len(coalescer) == 0


async def test_leave_after_done_does_not_cancel() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("finish")
    assert flight.task is not None
    await flight.task
    coalescer.leave(flight)
    assert not flight.task.cancelled()
    assert flight.error is None


async def test_cancelling_while_waiter_reads_ends_its_iteration() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("push", b"x")
    reader = asyncio.create_task(_collect(flight))
    await _settle()
    coalescer.leave(flight)
    assert await reader == [b"x"]
    assert flight.error is not None and flight.error.code == "cancelled"


async def test_exception_in_run_finishes_with_error(caplog: pytest.LogCaptureFixture) -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    waiter = asyncio.create_task(flight.wait_started())
    await _settle()
    with caplog.at_level(logging.ERROR, logger="hasten.flight"):
        await script.do("raise", RuntimeError("bug"))
        with pytest.raises(HastenError, match="internal error"):
            await waiter
    assert flight.is_done
    assert flight.error is not None
    assert flight.error.status_code == 500
    assert "coalesced upstream call failed" in caplog.text
    assert len(coalescer) == 0


async def test_exception_mid_stream_ends_readers() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("push", b"a")
    reader = asyncio.create_task(_collect(flight))
    await _settle()
    await script.do("raise", ValueError("oops"))
    assert await reader == [b"a"]
    assert isinstance(flight.error, HastenError)
    assert await flight.read_all() == b"a"


async def test_run_returning_without_finish_still_finishes() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("push", b"a")
    await script.do("return")
    assert flight.is_done
    assert flight.error is None
    assert await _collect(flight) == [b"a"]
    assert len(coalescer) == 0


async def test_run_that_finishes_with_error_keeps_it() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    error = UpstreamError("upstream down")
    await script.do("fail", error)
    assert flight.error is error
    with pytest.raises(UpstreamError):
        await flight.wait_started()


async def test_finished_flight_removed_and_next_join_is_new() -> None:
    coalescer = Coalescer()
    script = Script()
    flight, _ = coalescer.join("k", script)
    await script.do("start")
    await script.do("finish")
    await _settle()
    assert len(coalescer) == 0
    script2 = Script()
    again, is_new = coalescer.join("k", script2)
    assert is_new and again is not flight
    await _settle()
    assert script2.calls == 1
    await script2.do("finish")
    await _settle()
    assert len(coalescer) == 0


async def test_run_may_be_any_awaitable_factory() -> None:
    coalescer = Coalescer()

    async def run(flight: Flight) -> None:
        flight.start(200, {}, "u", 0.0)
        flight.push(b"x")
        flight.finish()

    factory: Callable[[Flight], Awaitable[None]] = run
    flight, _ = coalescer.join("k", factory)
    assert await _collect(flight) == [b"x"]
    await _settle()
    assert len(coalescer) == 0
